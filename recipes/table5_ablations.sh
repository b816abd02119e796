#!/usr/bin/env bash
# Table 5: ablations of NormFormer's operations, one run per row, final validation perplexity.
#
#   recipes/table5_ablations.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Rows: the Pre-LN baseline; NormFormer (Post-Attn LN + FFN LN + HeadScale); NormFormer without each
# of the three; with ResScale (λ_resid) added; with LN on q, k, v added ("+3 More LN"). The rows are
# recipes/sweeps/table5_ablations.yaml, run by normformer-sweep (the same spec runs on SLURM: docs/cluster.md).
# Paper scale: 125M (GPT-3 Small), the baseline and every NormFormer row at their LRs of
# `normformer-paper-settings --table 5` (the authors' commands); LR=... sets one LR for all. Tiny: all rows at LR 3e-3,
# UPDATES=300 each; small: the baseline at 3e-3 and every NormFormer row at 6e-3 (each model's best in the
# sweep of table7_hparams.sh small), UPDATES=300 each.
# SEEDS=N trains every row N times (docs/recipes.md). Writes OUT_DIR/table5.md: each row's difference to the
# baseline and to NormFormer, with 95% intervals paired by seed.
source "$(dirname "$0")/_lm_common.sh"
sweep table5_ablations ${LR:+--set "baseline_lr=$LR" --set "normformer_lr=$LR"}
show_table "$OUT/table5.md"

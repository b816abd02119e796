#!/usr/bin/env bash
# Table 7: learning rates. The baseline and NormFormer at several peak LRs (and NormFormer with
# ResScale), final validation perplexity: NormFormer keeps improving at LRs where the baseline stops.
#
#   recipes/table7_hparams.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# The grid is recipes/sweeps/table7_hparams.yaml, run by normformer-sweep (the same spec runs on SLURM:
# docs/cluster.md). Paper scale: 125M, the LRs of `normformer-paper-settings --table 7` (the authors' commands:
# baseline "GPT-3 replicated" and "stronger high-lr baseline"; NormFormer with and without --scale-resids).
# LRS="..." overrides the LR grid for both models. Tiny: LRs 1e-3 3e-3 1e-2, 300 updates each. Small: LRs
# 1e-3 3e-3 6e-3 1e-2 2e-2, 300 updates each: the sweep that chose the small scale's LRs, each model's best
# inside the grid (docs/results/small/). NormFormer + ResScale trains at the highest LR of NormFormer's grid.
# SEEDS=N trains every run N times (docs/recipes.md). Writes OUT_DIR/table7.md.
source "$(dirname "$0")/_lm_common.sh"
sweep table7_hparams ${LRS:+--set "baseline_lrs=$LRS" --set "normformer_lrs=$LRS"}
show_table "$OUT/table7.md"

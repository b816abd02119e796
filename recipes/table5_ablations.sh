#!/usr/bin/env bash
# Table 5: ablations of NormFormer's operations, one run per row, final validation perplexity.
#
#   recipes/table5_ablations.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Rows: the Pre-LN baseline; NormFormer (Post-Attn LN + FFN LN + HeadScale); NormFormer without each
# of the three; with ResScale (λ_resid) added; with LN on q, k, v added ("+3 More LN"). Paper scale:
# 125M (GPT-3 Small), the baseline and every NormFormer row at their LRs of
# `normformer-paper-settings --table 5` (the authors' commands); LR=... sets one LR for all. Tiny: all rows at LR 3e-3,
# UPDATES=300 each; small: the baseline at 3e-3 and every NormFormer row at 6e-3 (each model's best in the
# sweep of table7_hparams.sh small), UPDATES=300 each.
# SEEDS=N trains every row N times (docs/recipes.md). Writes OUT_DIR/table5.md: each row's difference to the
# baseline and to NormFormer, with 95% intervals paired by seed.
source "$(dirname "$0")/_lm_common.sh"
small_baseline_common 5
if [ "$SCALE" = paper ]; then
  BASE_LR="${LR:-${PAPER_LRS[125M/baseline]}}" NF_LR="${LR:-${PAPER_LRS[125M/normformer]}}"
else
  BASE_LR="${LR:-${CPU_LRS[0]}}" NF_LR="${LR:-${CPU_LRS[1]}}"
fi
ROWS=(
  "Baseline (Pre-LN)|$BASE_LR|"
  "NormFormer|$NF_LR|--scale-attn --scale-fc --scale-heads"
  "- Post-Attn LN|$NF_LR|--scale-fc --scale-heads"
  "- FFN LN|$NF_LR|--scale-attn --scale-heads"
  "- HeadScale|$NF_LR|--scale-attn --scale-fc"
  "+ ResScale|$NF_LR|--scale-attn --scale-fc --scale-heads --scale-resids"
  "+ 3 More LN (q, k, v)|$NF_LR|--scale-attn --scale-fc --scale-heads --scale-qkv"
)
TABLE_RUNS=()
for i in "${!ROWS[@]}"; do
  IFS="|" read -r label lr flags <<<"${ROWS[$i]}"
  # shellcheck disable=SC2086  # flags is a list of switches
  train_seeds "$OUT/run$i" "${COMMON[@]}" --lr "$lr" $flags
  seed_runs "$label (lr $lr)" "$OUT/run$i" train.log
done
wait_runs
analyze ppl-table "${TABLE_RUNS[@]}" --compare-to "NormFormer (lr $NF_LR)" \
  --title "Table 5, $SCALE scale: final validation perplexity" --out "$OUT/table5.md"
show_table "$OUT/table5.md"

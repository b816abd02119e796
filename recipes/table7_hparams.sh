#!/usr/bin/env bash
# Table 7: learning rates. The baseline and NormFormer at several peak LRs (and NormFormer with
# ResScale), final validation perplexity: NormFormer keeps improving at LRs where the baseline stops.
#
#   recipes/table7_hparams.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Paper scale: 125M, the LRs of `normformer-paper-settings --table 7` (the authors' commands: baseline
# "GPT-3 replicated" and "stronger high-lr baseline"; NormFormer with and without --scale-resids).
# LRS="..." overrides the LR grid for both models. Tiny: LRs 1e-3 3e-3 1e-2, 300 updates each. Small: LRs
# 1e-3 3e-3 6e-3 1e-2 2e-2, 300 updates each: the sweep that chose the small scale's LRs, each model's best
# inside the grid (docs/results/small/).
# SEEDS=N trains every run N times (docs/recipes.md). Writes OUT_DIR/table7.md.
source "$(dirname "$0")/_lm_common.sh"
small_baseline_common 7
if [ "$SCALE" = paper ]; then
  BASE_LRS="${LRS:-${PAPER_LRS[125M/baseline]}}" NF_LRS="${LRS:-${PAPER_LRS[125M/normformer]}}"
elif [ "$SCALE" = small ]; then
  BASE_LRS="${LRS:-1e-3 3e-3 6e-3 1e-2 2e-2}" NF_LRS="$BASE_LRS"
else
  BASE_LRS="${LRS:-1e-3 3e-3 1e-2}" NF_LRS="$BASE_LRS"
fi
NORMFORMER=(--scale-attn --scale-fc --scale-heads)
TABLE_RUNS=()
for lr in $BASE_LRS; do
  train_seeds "$OUT/baseline-lr$lr" "${COMMON[@]}" --lr "$lr"
  seed_runs "Baseline, lr $lr" "$OUT/baseline-lr$lr" train.log
done
for lr in $NF_LRS; do
  train_seeds "$OUT/normformer-lr$lr" "${COMMON[@]}" "${NORMFORMER[@]}" --lr "$lr"
  seed_runs "NormFormer, lr $lr" "$OUT/normformer-lr$lr" train.log
done
top_lr="${NF_LRS##* }"
train_seeds "$OUT/normformer-resscale-lr$top_lr" "${COMMON[@]}" "${NORMFORMER[@]}" --scale-resids --lr "$top_lr"
seed_runs "NormFormer + ResScale, lr $top_lr" "$OUT/normformer-resscale-lr$top_lr" train.log
wait_runs
analyze ppl-table "${TABLE_RUNS[@]}" --title "Table 7, $SCALE scale: final validation perplexity by learning rate" \
  --out "$OUT/table7.md"
show_table "$OUT/table7.md"

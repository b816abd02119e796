#!/usr/bin/env bash
# Table 6: model sizes. A Pre-LN baseline and a NormFormer at each size, final validation perplexity.
#
#   recipes/table6_sizes.sh [paper|tiny] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Paper scale: GPT-3 shapes, each model at the LR, dropout and batch of `normformer-paper-settings
# --table 6` (the authors' commands; their 2.7B NormFormer also used --activation-fn relu_squared, which
# normformer_lm accepts; here both models of a size use GELU, so that each row compares the NormFormer
# operations alone). SIZES="125M 355M" picks sizes. Tiny: 2x64, 4x96 and 6x128 (layers x width), 300
# updates each at LR 3e-3. Each size's pair is recipes/sweeps/table6_sizes.yaml, run by normformer-sweep (the same
# spec runs on SLURM: docs/cluster.md). SEEDS=N trains every model N times (docs/recipes.md). Writes OUT_DIR/table6.md.
SCALES="paper tiny"  # no small scale: its own shapes
source "$(dirname "$0")/_lm_common.sh"
if [ "$SCALE" = paper ]; then
  # shellcheck disable=SC2086  # SIZES is a list of sizes
  recipe_settings 6 ${SIZES:-}  # checked against the table's sizes and WORLD_SIZE
  SIZES="${PAPER_SIZES[*]}"
else
  SIZES="${SIZES:-tiny_2x64 tiny_4x96 tiny_6x128}"  # recipes/sweeps/table6_sizes.yaml's shapes
fi
TABLE_RUNS=()
for size in $SIZES; do  # each size's pair, every seed: recipes/sweeps/table6_sizes.yaml
  if [ "$SCALE" = paper ]; then sweep table6_sizes --size "$size"; else sweep table6_sizes --set "size=$size"; fi
  TABLE_RUNS+=(--run "$size baseline=$OUT/$size-baseline/train.log" --run "$size NormFormer=$OUT/$size-normformer/train.log")
done
analyze ppl-table --seeds "$SEEDS" "${TABLE_RUNS[@]}" --title "Table 6, $SCALE scale: final validation perplexity by size" \
  --out "$OUT/table6.md"
show_table "$OUT/table6.md"

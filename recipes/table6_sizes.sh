#!/usr/bin/env bash
# Table 6: model sizes. A Pre-LN baseline and a NormFormer at each size, final validation perplexity.
#
#   recipes/table6_sizes.sh [paper|tiny] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Paper scale: GPT-3 shapes, each model at the LR, dropout and batch of `normformer-paper-settings
# --table 6` (the authors' commands; their 2.7B NormFormer also used --activation-fn relu_squared, which
# normformer_lm accepts; here both models of a size use GELU, so that each row compares the NormFormer
# operations alone). SIZES="125M 355M" picks sizes. Tiny: 2x64, 4x96 and 6x128 (layers x width), 300
# updates each at LR 3e-3. SEEDS=N trains every model N times (docs/recipes.md). Writes OUT_DIR/table6.md.
SCALES="paper tiny"  # no small scale: its own shapes
source "$(dirname "$0")/_lm_common.sh"
DATA_BIN="$(data_dir)"
declare -A TINY_SHAPE=([tiny_2x64]="2 64" [tiny_4x96]="4 96" [tiny_6x128]="6 128")
if [ "$SCALE" = paper ]; then
  # shellcheck disable=SC2086  # SIZES is a list of sizes
  recipe_settings 6 ${SIZES:-}
  SIZES="${PAPER_SIZES[*]}"
else
  recipe_settings 6
  SIZES="${SIZES:-tiny_2x64 tiny_4x96 tiny_6x128}"
  cpu_train "${UPDATES:-300}"
fi
TABLE_RUNS=()
for size in $SIZES; do
  if [ "$SCALE" = paper ]; then
    paper_args "$size" baseline
    base=("$DATA_BIN" "${PAPER_TRAIN[@]}" "${ARGS[@]}" --lr "${PAPER_LRS[$size/baseline]}")
    paper_args "$size" normformer
    nf=("$DATA_BIN" "${PAPER_TRAIN[@]}" "${ARGS[@]}" --lr "${PAPER_LRS[$size/normformer]}")
  else
    read -r layers width <<<"${TINY_SHAPE[$size]}"
    shape=(--arch normformer_lm --decoder-layers "$layers" --decoder-embed-dim "$width"
      --decoder-ffn-embed-dim $((4 * width)) --decoder-attention-heads 4 --share-decoder-input-output-embed)
    base=("$DATA_BIN" "${TRAIN[@]}" "${shape[@]}" --lr 3e-3)
    nf=("${base[@]}" --scale-attn --scale-fc --scale-heads)
  fi
  train_seeds "$OUT/$size-baseline" "${base[@]}"
  train_seeds "$OUT/$size-normformer" "${nf[@]}"
  seed_runs "$size baseline" "$OUT/$size-baseline" train.log
  seed_runs "$size NormFormer" "$OUT/$size-normformer" train.log
done
wait_runs
analyze ppl-table "${TABLE_RUNS[@]}" --title "Table 6, $SCALE scale: final validation perplexity by size" --out "$OUT/table6.md"
show_table "$OUT/table6.md"

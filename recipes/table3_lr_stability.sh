#!/usr/bin/env bash
# Table 3: the LR stability test. The learning rate warms up linearly towards a very large peak over
# the whole run; each model stops where it diverges. Reported: the last good update, the learning
# rate reached, and the operation and layer whose activations first overflowed (> 65504, the fp16
# maximum, or non-finite), found by forward hooks (normformer-analyze lr-stability, docs/analysis.md).
#
#   recipes/table3_lr_stability.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Paper scale: 125M baseline and NormFormer in fp16 on GPUs (fairseq's loss scaler decides when the
# run cannot recover); PEAK_LR and WARMUP default to `normformer-paper-settings --table 3` (this
# package's choice, the paper's text does not give its schedule). Tiny: fp32 on CPU, stopping at the first
# activation above 65504; PEAK_LR 2.0 over WARMUP 1000 updates. SEEDS=N runs each model N times
# (docs/recipes.md). Writes OUT_DIR/table3.md.
source "$(dirname "$0")/_lm_common.sh"
DATA_BIN="$(data_dir)"
recipe_settings 3 125M
if [ "$SCALE" = paper ]; then
  PEAK_LR="${PEAK_LR:-${PAPER_LRS[125M/baseline]}}" WARMUP="${WARMUP:-${PAPER_WARMUP[125M/baseline]}}"
  # the runner sets the task, schedule, log format and save dir itself: the batch and model flags only
  eval "BATCH=(${PAPER_BATCH_ARGS[125M/baseline]})"
  MODEL_ARGS=("${BATCH[@]}" --sample-break-mode none --required-batch-size-multiple 1 "${PAPER_OPTIMIZER[@]}"
    --dropout "${PAPER_DROPOUT[125M/baseline]}" --attention-dropout "${PAPER_DROPOUT[125M/baseline]}"
    "${PAPER_PRECISION[@]}" --disable-validation --no-save --seed 1)
  BASE=(--arch "${PAPER_ARCH[125M/baseline]}") NF=(--arch "${PAPER_ARCH[125M/normformer]}")
else
  PEAK_LR="${PEAK_LR:-2.0}" WARMUP="${WARMUP:-1000}"
  MODEL_ARGS=(--sample-break-mode none --tokens-per-sample 128 --batch-size 16 "${PAPER_OPTIMIZER[@]}"
    --dropout 0.1 --attention-dropout 0.1 --cpu --num-workers 0 --disable-validation --no-save --seed 1)
  BASE=("${CPU_MODEL[@]}") NF=("${CPU_MODEL[@]}" --scale-attn --scale-fc --scale-heads)
fi

stability_run() {  # stability_run NAME SEED MODEL_FLAGS...: reuses a finished run (the runner marks it done)
  local name="$1" seed="$2" dir
  dir="$(seed_dir "$OUT/$name" "$seed")"
  shift 2
  if is_done "$dir"; then log "$name seed $seed: finished before, reused"; return; fi
  analyze lr-stability "$DATA_BIN" --peak-lr "$PEAK_LR" --warmup-updates "$WARMUP" --out-dir "$dir" \
    -- "${MODEL_ARGS[@]}" "$@" --seed "$seed"
}
for seed in $(seq "$SEEDS"); do
  if [ "$DRY_RUN" = 1 ] || ((JOBS == 1)); then
    stability_run baseline "$seed" "${BASE[@]}"
    stability_run normformer "$seed" "${NF[@]}"
  else
    stability_run baseline "$seed" "${BASE[@]}" & PIDS+=($!)
    stability_run normformer "$seed" "${NF[@]}" & PIDS+=($!)
    wait_runs
  fi
done
analyze lr-table --seeds "$SEEDS" --run "Baseline=$OUT/baseline" --run "NormFormer=$OUT/normformer" --out "$OUT/table3.md"

# Shared by the causal-LM recipes (Tables 3, 5, 6, 7, 8 and Figures 2-5); sourced, not run.
#
#   recipes/<recipe>.sh [paper|tiny] [OUT_DIR]
#
# paper: the paper's hyperparameters, for a GPU cluster. Needs DATA (a fairseq-preprocess directory
#        of your corpus). WORLD_SIZE GPUs (default 8); --update-freq is computed so that one update
#        sees the paper's tokens: world size x --batch-size x --tokens-per-sample x --update-freq =
#        0.5M tokens (125M, 355M) or 1M (1.3B, 2.7B), as the authors' examples/normformer/train_lm.sh.
# tiny:  a scaled-down run on 2 CPU cores within 15 minutes, on the standard-library docstring
#        corpus (built under work/recipes/ on first use). Two single-threaded runs go in parallel.
# DRY_RUN=1 writes and prints the commands without running them. Every command run is appended to
# OUT_DIR/commands.sh. Finished runs (a "done" marker) are reused, never trained again.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$REPO/.venv/bin/python}"
BIN="$(dirname "$PY")"
USER_DIR="$REPO/fairseq_normformer"
RECIPE="$(basename "$0" .sh)"
SCALE="${1:-paper}"
OUT="$(mkdir -p "${2:-$REPO/work/recipes/$RECIPE-$SCALE}" && cd "${2:-$REPO/work/recipes/$RECIPE-$SCALE}" && pwd)"
DRY_RUN="${DRY_RUN:-0}"
case "$SCALE" in
  paper | tiny) ;;
  *) echo "usage: $0 [paper|tiny] [OUT_DIR]" >&2; exit 2 ;;
esac
if [ "$SCALE" = tiny ]; then export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; fi
JOBS="${JOBS:-$([ "$SCALE" = tiny ] && echo 2 || echo 1)}"  # runs at a time

log() { echo "[$RECIPE $SCALE] $*" >&2; }

# Append a command to OUT/commands.sh (paths relative to the repository root); run it unless DRY_RUN=1.
run() {
  local line
  line="$(printf '%q ' "$@")"
  echo "${line//$REPO\//}" >>"$OUT/commands.sh"
  if [ "$DRY_RUN" = 1 ]; then echo "$line"; else "$@"; fi
}

# --- data -----------------------------------------------------------------------------------
data_dir() {
  if [ "$SCALE" = paper ]; then
    : "${DATA:?set DATA to a fairseq-preprocess output directory (the paper used a private corpus)}"
    echo "$DATA"
  else
    local corpus="$REPO/work/recipes/corpus-lm-v2000"
    [ "$DRY_RUN" = 1 ] || run "$BIN/normformer-build-corpus" --out "$corpus" --vocab-size 2000 >&2
    echo "$corpus/data-bin"
  fi
}

# --- the paper's settings -----------------------------------------------------------------------
# update_freq TARGET_TOKENS BATCH_SIZE TOKENS_PER_SAMPLE WORLD_SIZE
update_freq() {
  local per_step=$(($2 * $3 * $4))
  if (($1 % per_step != 0)); then
    echo "error: $1 tokens per update is not a multiple of world size $4 x batch $2 x tokens $3" >&2
    exit 2
  fi
  echo $(($1 / per_step))
}

# paper_batch SIZE: the batch flags of one GPT-3 size (Table 6), into the array BATCH.
paper_batch() {
  local world="${WORLD_SIZE:-8}" tps="${TOKENS_PER_SAMPLE:-2048}" bsz target updates
  case "$1" in
    gpt3_small | gpt3_medium) bsz="${BATCH_SIZE:-16}" target=524288 updates=572204 ;;
    gpt3_large | gpt3_xl | gpt3_2_7) bsz="${BATCH_SIZE:-4}" target=1048576 updates=286102 ;;
    *) echo "error: unknown size $1" >&2; exit 2 ;;
  esac
  updates="${MAX_UPDATE:-$updates}"
  BATCH=(--tokens-per-sample "$tps" --batch-size "$bsz" --update-freq "$(update_freq $target "$bsz" "$tps" "$world")"
         --distributed-world-size "$world" --total-num-update "$updates" --max-update "$updates")
}

# Optimisation and regularisation of the paper (authors' examples/normformer/train_lm.sh).
PAPER_TRAIN=(--task language_modeling_analysis --sample-break-mode none --required-batch-size-multiple 1
  --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-08 --weight-decay 0.01 --clip-norm 0.0
  --lr-scheduler polynomial_decay --warmup-updates 750 --dropout 0.1 --attention-dropout 0.1
  --fp16 --fp16-init-scale 4 --validate-interval-updates 1000 --save-interval-updates 10000
  --keep-interval-updates 2 --no-epoch-checkpoints --seed 1 --log-format json --log-interval 100)

# The same recipe scaled down for 2 CPU cores (fp32: fp16 needs a GPU).
TINY_MODEL=(--arch normformer_lm --decoder-layers 6 --decoder-embed-dim 64 --decoder-ffn-embed-dim 256
  --decoder-attention-heads 4 --share-decoder-input-output-embed)
tiny_train() {  # tiny_train MAX_UPDATE: into the array TRAIN
  TRAIN=(--task language_modeling_analysis --sample-break-mode none --tokens-per-sample 128 --batch-size 16
    --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-08 --weight-decay 0.01 --clip-norm 0.0
    --lr-scheduler polynomial_decay --warmup-updates $(($1 / 10)) --total-num-update "$1" --max-update "$1"
    --dropout 0.1 --attention-dropout 0.1 --validate-interval-updates $(($1 / 10)) --validate-interval 1000
    --no-epoch-checkpoints
    --save-interval-updates 100000 --seed 1 --cpu --num-workers 0 --log-format json --log-interval 10)
}

# --- training runs -------------------------------------------------------------------------------
# train RUN_DIR FAIRSEQ_TRAIN_ARGS...: fairseq-train into RUN_DIR (train.log, checkpoints/), in the
# background when JOBS > 1; a finished run is reused.
PIDS=()
small_baseline_common() {  # into COMMON: data + training flags + the 125M Pre-LN shape (paper) or TINY_MODEL (tiny)
  local data_bin
  data_bin="$(data_dir)"
  if [ "$SCALE" = paper ]; then
    paper_batch gpt3_small
    COMMON=("$data_bin" "${PAPER_TRAIN[@]}" "${BATCH[@]}" --arch preln_lm_gpt3_small)
  else
    tiny_train "${UPDATES:-300}"
    COMMON=("$data_bin" "${TRAIN[@]}" "${TINY_MODEL[@]}")
  fi
}

train() {
  local dir="$1"
  shift
  if [ -e "$dir/done" ]; then log "$(basename "$dir"): finished before, reused"; return; fi
  mkdir -p "$dir"
  log "training $(basename "$dir") -> $dir/train.log"
  if [ "$DRY_RUN" = 1 ]; then
    run "$BIN/fairseq-train" "$@" --user-dir "$USER_DIR" --save-dir "$dir/checkpoints"
    return
  fi
  _train_one "$dir" "$@" &
  PIDS+=($!)
  if ((${#PIDS[@]} >= JOBS)); then wait_runs; fi
}

_train_one() {
  local dir="$1"
  shift
  if run "$BIN/fairseq-train" "$@" --user-dir "$USER_DIR" --save-dir "$dir/checkpoints" >"$dir/train.log" 2>&1; then
    touch "$dir/done"
  else
    log "$(basename "$dir") failed; see $dir/train.log"
    return 1
  fi
}

wait_runs() {  # wait for the background runs; fail if one failed
  local pid status=0
  for pid in "${PIDS[@]}"; do wait "$pid" || status=1; done
  PIDS=()
  return $status
}

analyze() { run "$BIN/normformer-analyze" "$@"; }

# --- the baseline / NormFormer pair of Figures 2-5 -------------------------------------------------
# pair_runs: a Pre-LN baseline and a NormFormer (125M at paper scale, each at the authors' best LR:
# baseline 1e-3, "stronger high-lr baseline"; NormFormer 3e-3), with validation, checkpoints and the
# gradient norms recorded. Shared by the figure recipes through PAIR (default work/recipes/lm-pair-SCALE).
pair_runs() {
  PAIR="${PAIR:-$REPO/work/recipes/lm-pair-$SCALE}"
  local data
  data="$(data_dir)"
  local base_lr="${BASE_LR:-1e-3}" nf_lr="${NF_LR:-3e-3}" interval="${GRAD_NORM_INTERVAL:-100}"
  local base=(--arch preln_lm_gpt3_small) nf=(--arch normformer_lm_gpt3_small) common
  if [ "$SCALE" = paper ]; then
    paper_batch gpt3_small
    common=("$data" "${PAPER_TRAIN[@]}" "${BATCH[@]}")
  else
    base_lr="${BASE_LR:-3e-3}" nf_lr="${NF_LR:-3e-3}" interval="${GRAD_NORM_INTERVAL:-5}"
    tiny_train "${PAIR_UPDATES:-800}"
    base=("${TINY_MODEL[@]}") nf=("${TINY_MODEL[@]}" --scale-attn --scale-fc --scale-heads)
    common=("$data" "${TRAIN[@]}")
  fi
  train "$PAIR/baseline" "${common[@]}" "${base[@]}" --lr "$base_lr" \
    --grad-norm-interval "$interval" --grad-norm-file "$PAIR/baseline/grad_norms.jsonl"
  train "$PAIR/normformer" "${common[@]}" "${nf[@]}" --lr "$nf_lr" \
    --grad-norm-interval "$interval" --grad-norm-file "$PAIR/normformer/grad_norms.jsonl"
  wait_runs
}

# Shared by the causal-LM recipes (Tables 3, 5, 6, 7, 8 and Figures 2-5), whose header, run-directory
# convention, log and wait_runs recipes/xiong_warmup_study.sh reuses too; sourced, not run.
#
#   recipes/<recipe>.sh [paper|tiny|small] [OUT_DIR]
#
# paper: the paper's settings (fairseq_normformer/paper.py, `normformer-paper-settings`), for a GPU
#        cluster. Needs DATA (a fairseq-preprocess directory of your corpus). WORLD_SIZE GPUs (default 8),
#        BATCH_SIZE and TOKENS_PER_SAMPLE (default: the authors'); --update-freq is computed so that
#        one update sees the paper's tokens (0.5M for 125M and 355M, 1M above). GPU_MEM_GB (default 32):
#        the memory plan (docs/distributed.md#memory-plan) picks the DDP backend and activation
#        checkpointing that fit, prints its arithmetic, and refuses a run that cannot fit.
# tiny:  a scaled-down run on 2 CPU cores within 15 minutes, on the standard-library docstring
#        corpus (built under work/recipes/ on first use). Two single-threaded runs go in parallel.
# small: 4 layers x 256 on the Python manual (normformer-build-corpus --python-docs, needs the Debian package
#        python3.11-doc), a run of a few hundred updates in minutes on 2 CPU cores: where the paper's
#        "NormFormer tolerates a higher LR" shows on CPU (docs/results/small/README.md). Recipes with
#        their own shapes (Tables 6, 8, Xiong) set SCALES="paper tiny" before sourcing this file.
# Runs follow the run-directory convention of recipes/_run_dir.sh (docs/recipes.md): DRY_RUN=1 prints
# the commands without running them, every command is appended to OUT_DIR/commands.sh, finished runs
# (a "done" marker) are reused, never trained again.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/recipes/_python.sh"  # PY, BIN
USER_DIR="$REPO/fairseq_normformer"
RECIPE="$(basename "$0" .sh)"
SCALE="${1:-paper}"
OUT="$(mkdir -p "${2:-$REPO/work/recipes/$RECIPE-$SCALE}" && cd "${2:-$REPO/work/recipes/$RECIPE-$SCALE}" && pwd)"
source "$REPO/recipes/_run_dir.sh"
SCALES="${SCALES:-paper tiny small}"
if [[ " $SCALES " != *" $SCALE "* ]]; then echo "usage: $0 [${SCALES// /|}] [OUT_DIR]" >&2; exit 2; fi
if [[ " $SCALES " == *" paper "* ]]; then refuse_unread_data paper; else refuse_unread_data; fi
if [ "$SCALE" != paper ]; then export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; fi
JOBS="${JOBS:-$([ "$SCALE" = paper ] && echo 1 || echo 2)}"  # runs at a time

log() { echo "[$RECIPE $SCALE] $*" >&2; }

# --- data -----------------------------------------------------------------------------------
data_dir() {
  local corpus="$REPO/work/recipes/corpus-lm-v2000" source=()
  case "$SCALE" in
    paper) echo "${DATA:?set DATA to a fairseq-preprocess output directory (the paper used a private corpus)}"; return ;;
    small) corpus="$REPO/work/recipes/corpus-pydocs-v2000" source=(--python-docs) ;;
  esac
  [ "$DRY_RUN" = 1 ] || run "$BIN/normformer-build-corpus" --out "$corpus" "${source[@]}" --vocab-size 2000 >&2
  echo "$corpus/data-bin"
}

# --- the paper's settings -----------------------------------------------------------------------
# recipe_settings TABLE [SIZE...]: the PAPER_* arrays of one paper table (paper_settings), for WORLD_SIZE
# GPUs at paper scale; the CPU scales use the paper's optimiser (PAPER_OPTIMIZER) only.
recipe_settings() {
  local table="$1" size flags=()
  shift
  for size in "$@"; do flags+=(--size "$size"); done
  if [ "$SCALE" = paper ]; then
    flags+=(--world-size "${WORLD_SIZE:-8}" --gpu-memory "${GPU_MEM_GB:-32}")
    if [ -n "${BATCH_SIZE:-}" ]; then flags+=(--batch-size "$BATCH_SIZE"); fi
    if [ -n "${TOKENS_PER_SAMPLE:-}" ]; then flags+=(--tokens-per-sample "$TOKENS_PER_SAMPLE"); fi
  fi
  paper_settings --table "$table" "${flags[@]}"
}

# paper_args SIZE MODEL: into the array ARGS, one paper-scale run's model, batch, optimiser, schedule
# precision and memory-plan flags (all but --lr); MAX_UPDATE=N shortens the schedule.
paper_args() {
  local key="$1/$2" model batch schedule precision memory
  eval "model=(${PAPER_MODEL_ARGS[$key]}) batch=(${PAPER_BATCH_ARGS[$key]}) schedule=(${PAPER_SCHEDULE_ARGS[$key]})"
  eval "precision=(${PAPER_PRECISION_ARGS[$key]}) memory=(${PAPER_MEMORY_ARGS[$key]})"
  ARGS=("${model[@]}" "${batch[@]}" "${PAPER_OPTIMIZER[@]}" "${schedule[@]}" "${precision[@]}" "${memory[@]}")
  if [ -n "${MAX_UPDATE:-}" ]; then ARGS+=(--total-num-update "$MAX_UPDATE" --max-update "$MAX_UPDATE"); fi
}

# Bookkeeping of the paper-scale runs (validation, checkpoints, logs).
PAPER_TRAIN=(--task language_modeling_analysis --sample-break-mode none --required-batch-size-multiple 1
  --validate-interval-updates 1000 --save-interval-updates 10000 --keep-interval-updates 2
  --no-epoch-checkpoints --seed 1 --log-format json --log-interval 100)

# The same recipe scaled down for 2 CPU cores (fp32: fp16 needs a GPU): CPU_MODEL, the baseline's shape.
if [ "$SCALE" = small ]; then
  CPU_MODEL=(--arch normformer_lm --decoder-layers 4 --decoder-embed-dim 256 --decoder-ffn-embed-dim 1024
    --decoder-attention-heads 4 --share-decoder-input-output-embed)
else
  CPU_MODEL=(--arch normformer_lm --decoder-layers 6 --decoder-embed-dim 64 --decoder-ffn-embed-dim 256
    --decoder-attention-heads 4 --share-decoder-input-output-embed)
fi
cpu_train() {  # cpu_train MAX_UPDATE: into the array TRAIN
  TRAIN=(--task language_modeling_analysis --sample-break-mode none --tokens-per-sample 128 --batch-size 16
    "${PAPER_OPTIMIZER[@]}" --lr-scheduler polynomial_decay --warmup-updates $(($1 / 10)) --total-num-update "$1" --max-update "$1"
    --dropout 0.1 --attention-dropout 0.1 --validate-interval-updates $(($1 / 10)) --validate-interval 1000
    --no-epoch-checkpoints
    --save-interval-updates 100000 --seed 1 --cpu --num-workers 0 --log-format json --log-interval 10)
}

# --- training runs -------------------------------------------------------------------------------
# train RUN_DIR FAIRSEQ_TRAIN_ARGS...: fairseq-train into RUN_DIR (train.log, checkpoints/), in the
# background when JOBS > 1 (wait_runs waits for them); a finished run is reused.
train() {
  local dir="$1"
  shift
  if is_done "$dir"; then log "$(basename "$dir"): finished before, reused"; return; fi
  mkdir -p "$dir"
  log "training $(basename "$dir") -> $dir/train.log"
  local cmd=("$BIN/fairseq-train" "$@" --user-dir "$USER_DIR" --save-dir "$dir/checkpoints")
  if [ "$DRY_RUN" = 1 ]; then run_in "$dir" "$dir/train.log" "${cmd[@]}"; return; fi
  run_in "$dir" "$dir/train.log" "${cmd[@]}" &
  PIDS+=($!)
  if ((${#PIDS[@]} >= JOBS)); then wait_runs; fi
}

analyze() { run "$BIN/normformer-analyze" "$@"; }

# sweep SPEC [normformer-sweep ARGS...]: the recipe's grid, recipes/sweeps/SPEC.yaml, run by normformer-sweep
# (docs/cluster.md) into OUT at SCALE: SEEDS seeds, JOBS points at a time, UPDATES updates (DRY_RUN=1: printed, not
# run); the paper scale on DATA, with WORLD_SIZE GPUs (default 8) that fairseq-train spawns a process for each,
# GPU_MEM_GB, BATCH_SIZE, TOKENS_PER_SAMPLE and MAX_UPDATE as above; RUNS_ARCHIVE=DIR: each settled run kept there
# without its checkpoints and restored from there first (normformer-sweep --archive). The spec's reports follow.
sweep() {
  local args=("$REPO/recipes/sweeps/$1.yaml" --scale "$SCALE" --out "$OUT" --seeds "$SEEDS" --jobs "$JOBS"
    ${RUNS_ARCHIVE:+--archive "$RUNS_ARCHIVE"})
  shift
  if [ "$SCALE" = paper ]; then
    args+=(--data "${DATA:?set DATA to a fairseq-preprocess output directory (the paper used a private corpus)}"
      --world-size "${WORLD_SIZE:-8}" --gpu-memory "${GPU_MEM_GB:-32}" ${BATCH_SIZE:+--batch-size "$BATCH_SIZE"}
      ${TOKENS_PER_SAMPLE:+--tokens-per-sample "$TOKENS_PER_SAMPLE"} ${MAX_UPDATE:+--updates "$MAX_UPDATE"})
    if [ "$DRY_RUN" = 1 ]; then args+=(--remote-data); fi
  elif [ -n "${UPDATES:-}" ]; then
    args+=(--updates "$UPDATES")
  fi
  if [ "$DRY_RUN" = 1 ]; then args+=(--dry-run); fi
  PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m fairseq_normformer.cli.sweep "${args[@]}" "$@"  # normformer-sweep
}

show_table() { if [ "$DRY_RUN" != 1 ]; then cat "$1"; fi; }  # show_table FILE: a table analyze wrote, on stdout

# --- the baseline / NormFormer pair of Figures 2-5 -------------------------------------------------
# pair_runs [SPEC]: the pair of recipes/sweeps/lm_pair.yaml (a Pre-LN baseline and a NormFormer, 125M at paper scale,
# each at the authors' best LR, normformer-paper-settings --table figs), with validation, checkpoints and the
# gradient norms recorded (every GRAD_NORM_INTERVAL updates), every seed (SEEDS, seed_dir), PAIR_UPDATES updates
# each at the CPU scales; SPEC (fig2_time_to_target: the pair and Fig. 2) adds its reports, into OUT. Shared by the
# figure recipes through PAIR (default work/recipes/lm-pair-SCALE); BASE_LR and NF_LR set the LRs.
pair_runs() {
  PAIR="${PAIR:-$REPO/work/recipes/lm-pair-$SCALE}"
  UPDATES="${PAIR_UPDATES:-}" sweep "${1:-lm_pair}" --out "$PAIR" --report-dir "$OUT" \
    ${BASE_LR:+--set "baseline_lr=$BASE_LR"} ${NF_LR:+--set "normformer_lr=$NF_LR"} \
    ${GRAD_NORM_INTERVAL:+--set "grad_norm_interval=$GRAD_NORM_INTERVAL"}
}

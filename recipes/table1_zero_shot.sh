#!/usr/bin/env bash
# Table 1 of the NormFormer paper: zero-shot accuracy of causal LMs (Pre-LN baseline and NormFormer)
# on HellaSwag, PIQA, WinoGrande, StoryCloze and OpenBookQA, with GPT-3's prompts and normalizations
# (docs/zero_shot.md). Trains each model with fairseq-train, scores its last checkpoint with
# `normformer-zero-shot score`, and writes the markdown table WORKDIR/table1.md.
#
#   recipes/table1_zero_shot.sh tiny  [WORKDIR]   (default work/table1_tiny; 2 CPU cores, <= 15 min)
#   DATA_BIN=... SPM_MODEL=... TASK_DIR=... recipes/table1_zero_shot.sh paper [WORKDIR]
#
# tiny: builds the standard-library docstring corpus, makes 100 examples per task in the five public
# formats from its held-out (valid + test) text, and trains a 4-layer, 128-wide Pre-LN model and
# NormFormer for MAX_UPDATE (200) updates each (same data, seed and learning rate, LR=2e-3).
# paper: the paper's sizes (SIZES, default 125M 355M 1.3B 2.7B) and every setting of
# `normformer-paper-settings --table 1` (fairseq_normformer/paper.py: learning rates, dropout, Adam,
# warmup, fp16, 2048 tokens per sample, 0.5M or 1M tokens per update, 300B tokens); --update-freq is
# chosen so that TOKENS_PER_SAMPLE x BATCH_SIZE x WORLD_SIZE x update-freq is the tokens per update.
# DATA_BIN (fairseq-preprocess output) and SPM_MODEL (the SentencePiece model it was encoded with) are
# your pre-training data; TASK_DIR holds hellaswag.jsonl, piqa.jsonl with piqa-labels.lst,
# winogrande.jsonl, storycloze.csv (or .jsonl) and openbookqa.jsonl (the dev sets, public formats).
#
# SEEDS=N trains and scores each model N times (--seed K; WORKDIR/ARCH/seedK and WORKDIR/results/seedK for K > 1):
# the table gives mean ± std over the seeds and each model's average difference to the first model, a 95%
# interval paired by seed (docs/analysis.md).
# Environment: WORLD_SIZE (8), BATCH_SIZE (sequences per GPU; default the authors'), LAUNCHER (a prefix such as srun
# options; empty: fairseq spawns one process per local GPU), FP16_FLAGS, EXTRA_FLAGS, DEVICE (cuda),
# LR_<RUN> (e.g. LR_normformer_lm_gpt3_small=3e-3). Runs follow recipes/_run_dir.sh (docs/recipes.md):
# DRY_RUN=1 prints the commands only, every command is appended to WORKDIR/commands.sh, finished runs
# (a "done" marker) are kept and not trained again.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
source "$HERE/_python.sh"  # PY, BIN
SCALE=${1:?usage: recipes/table1_zero_shot.sh tiny|paper [WORKDIR]}
WORK=${2:-work/table1_$SCALE}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
RECIPE=table1
OUT=$WORK
mkdir -p "$OUT"
source "$HERE/_run_dir.sh"
refuse_unread_data  # reads no DATA (its data: see above)

case $SCALE in
  tiny)
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
    MAX_UPDATE=${MAX_UPDATE:-200}
    LR=${LR:-2e-3}
    EXAMPLES=${EXAMPLES:-100}
    run "$BIN/normformer-build-corpus" --out "$WORK/corpus" --vocab-size "${VOCAB_SIZE:-2000}" \
      --max-chars "${MAX_CHARS:-1500000}"
    DATA_BIN=$WORK/corpus/data-bin
    SPM_MODEL=$WORK/corpus/spm.model
    TASK_DIR=$WORK/tasks
    if [ ! -e "$TASK_DIR/hellaswag.jsonl" ]; then
      [ "$DRY_RUN" = 1 ] || cat "$WORK/corpus/raw/valid.txt" "$WORK/corpus/raw/test.txt" >"$WORK/heldout.txt"
      run "$BIN/normformer-zero-shot" make-stdlib-tasks --raw "$WORK/heldout.txt" --out-dir "$TASK_DIR" \
        --examples "$EXAMPLES"
    fi
    RUNS="preln_lm normformer_lm"
    MODEL_FLAGS="--decoder-layers 4 --decoder-embed-dim 128 --decoder-ffn-embed-dim 512 --decoder-attention-heads 4
      --activation-fn gelu --share-decoder-input-output-embed --tokens-per-sample 128 --batch-size 16"
    DEVICE=cpu
    paper_settings --table 1  # the paper's optimiser, PAPER_OPTIMIZER
    ;;
  paper)
    : "${DATA_BIN:?set DATA_BIN to the fairseq-preprocess output of the pre-training data}"
    : "${SPM_MODEL:?set SPM_MODEL to the SentencePiece model the data was encoded with}"
    : "${TASK_DIR:?set TASK_DIR to the directory of the five task files (see the header)}"
    FLAGS=(--table 1 --world-size "${WORLD_SIZE:-8}")
    for SIZE in ${SIZES:-}; do FLAGS+=(--size "$SIZE"); done
    [ -z "${BATCH_SIZE:-}" ] || FLAGS+=(--batch-size "$BATCH_SIZE")
    [ -z "${TOKENS_PER_SAMPLE:-}" ] || FLAGS+=(--tokens-per-sample "$TOKENS_PER_SAMPLE")
    paper_settings "${FLAGS[@]}"
    FP16_FLAGS=${FP16_FLAGS-${PAPER_PRECISION[*]}}
    DEVICE=${DEVICE:-cuda}
    RUNS=""
    for SIZE in "${PAPER_SIZES[@]}"; do
      RUNS="$RUNS $SIZE/baseline $SIZE/normformer"
    done
    ;;
  *) echo "unknown scale $SCALE (tiny or paper)" >&2; exit 2 ;;
esac

train() {  # RUN (tiny: an arch; paper: SIZE/MODEL) SEED -> WORK/ARCH[/seedK]/checkpoint_last.pt
  local key=$1 seed=$2 arch lr flags updates warmup dir
  if [ "$SCALE" = tiny ]; then
    arch=$key
    local lr_var=LR_$arch
    lr=${!lr_var:-$LR} updates=$MAX_UPDATE warmup=$((MAX_UPDATE / 10))
    flags="--arch normformer_lm $MODEL_FLAGS --cpu --num-workers 0 ${PAPER_OPTIMIZER[*]@Q} --lr-scheduler polynomial_decay
      --warmup-updates $warmup --total-num-update $updates --max-update $updates --dropout 0.1 --attention-dropout 0.1"
    [ "$arch" = normformer_lm ] && flags="$flags --scale-attn --scale-fc --scale-heads"
  else
    arch=${PAPER_ARCH[$key]}
    local lr_var=LR_$arch
    lr=${!lr_var:-${PAPER_LRS[$key]}} updates=${PAPER_MAX_UPDATE[$key]}
    flags="${PAPER_MODEL_ARGS[$key]} ${PAPER_BATCH_ARGS[$key]} ${PAPER_OPTIMIZER[*]@Q} ${PAPER_SCHEDULE_ARGS[$key]}
      $FP16_FLAGS --num-workers 2"
  fi
  dir=$(seed_dir "$WORK/$arch" "$seed")
  echo "[table1] $arch (lr $lr, $updates updates, seed $seed) -> $dir/train.log" >&2
  eval "flags=($flags)"
  # shellcheck disable=SC2086  # EXTRA_FLAGS and LAUNCHER are lists of words
  run_in "$dir" "$dir/train.log" ${LAUNCHER:-} "$BIN/fairseq-train" "$DATA_BIN" \
    --user-dir "$REPO/fairseq_normformer" --task language_modeling --sample-break-mode none "${flags[@]}" \
    --lr "$lr" --save-dir "$dir" --no-epoch-checkpoints \
    --disable-validation --save-interval-updates 1000 --keep-interval-updates 1 --seed "$seed" \
    --log-format simple --log-interval 25 $EXTRA_FLAGS
}

RESULTS=()
for RUN in $RUNS; do
  for SEED in $(seq "$SEEDS"); do
    train "$RUN" "$SEED"
    NAME=$RUN
    [ "$SCALE" = tiny ] || NAME=${PAPER_ARCH[$RUN]}
    TASK_ARGS=(--hellaswag "$TASK_DIR/hellaswag.jsonl" --piqa "$TASK_DIR/piqa.jsonl"
               --winogrande "$TASK_DIR/winogrande.jsonl" --openbookqa "$TASK_DIR/openbookqa.jsonl")
    STORYCLOZE=$TASK_DIR/storycloze.csv
    [ -e "$TASK_DIR/storycloze.jsonl" ] && STORYCLOZE=$TASK_DIR/storycloze.jsonl
    RESULT=$(seed_dir "$WORK/results" "$SEED")/$NAME.json
    mkdir -p "$(dirname "$RESULT")"
    run "$BIN/normformer-zero-shot" score --checkpoint "$(seed_dir "$WORK/$NAME" "$SEED")/checkpoint_last.pt" \
      --spm-model "$SPM_MODEL" --data "$DATA_BIN" --name "$NAME" --device "$DEVICE" "${TASK_ARGS[@]}" \
      --storycloze "$STORYCLOZE" --output "$RESULT"
    RESULTS+=("$RESULT")
  done
done
run "$BIN/normformer-zero-shot" table "${RESULTS[@]}" --output "$WORK/table1.md"

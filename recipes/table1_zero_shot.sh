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
# paper: the paper's sizes (SIZES, default 125M, 355M, 1.3B, 2.7B) and hyperparameters: Adam
# (0.9, 0.98), eps 1e-8, weight decay 0.01, polynomial decay after 750 warmup updates, dropout and
# attention dropout 0.1, 2048 tokens per sample, 0.5M tokens per update (1M for 1.3B and 2.7B),
# learning rates as below, TOTAL_TOKENS (default GPT-3's 300B) of training. --update-freq is chosen
# so that TOKENS_PER_SAMPLE x BATCH_SIZE x WORLD_SIZE x update-freq reaches the tokens per update.
# DATA_BIN (fairseq-preprocess output) and SPM_MODEL (the SentencePiece model it was encoded with) are
# your pre-training data; TASK_DIR holds hellaswag.jsonl, piqa.jsonl with piqa-labels.lst,
# winogrande.jsonl, storycloze.csv (or .jsonl) and openbookqa.jsonl (the dev sets, public formats).
#
# Environment: WORLD_SIZE (8), BATCH_SIZE (sequences per GPU, 8), LAUNCHER (a prefix such as srun
# options; empty: fairseq spawns one process per local GPU), FP16_FLAGS, EXTRA_FLAGS, DEVICE (cuda),
# LR_<RUN> (e.g. LR_normformer_lm_gpt3_small=3e-3), DRY_RUN=1 (print the commands only).
# Finished runs (their log says "done training") are kept and not trained again.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PY=${PY:-$REPO/.venv/bin/python}
BIN=$(dirname "$PY")
SCALE=${1:?usage: recipes/table1_zero_shot.sh tiny|paper [WORKDIR]}
WORK=${2:-work/table1_$SCALE}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
DRY_RUN=${DRY_RUN:-}

run() {  # print, and run unless DRY_RUN
  echo "+ $*" >&2
  [ -n "$DRY_RUN" ] || "$@"
}

# learning rates (paper / authors' command); the Pre-LN baselines of 1.3B and 2.7B needed lower ones
default_lr() {
  case $1 in
    preln_lm_gpt3_small) echo 6e-4 ;;
    normformer_lm_gpt3_small) echo 3e-3 ;;
    *_gpt3_medium) echo 1e-3 ;;
    preln_lm_gpt3_xl) echo 2e-4 ;;
    normformer_lm_gpt3_xl) echo 6e-4 ;;
    preln_lm_gpt3_2_7) echo 1.6e-4 ;;
    normformer_lm_gpt3_2_7) echo 6e-4 ;;
    *) echo "no learning rate for $1" >&2; exit 2 ;;
  esac
}

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
      [ -n "$DRY_RUN" ] || cat "$WORK/corpus/raw/valid.txt" "$WORK/corpus/raw/test.txt" >"$WORK/heldout.txt"
      run "$BIN/normformer-zero-shot" make-stdlib-tasks --raw "$WORK/heldout.txt" --out-dir "$TASK_DIR" \
        --examples "$EXAMPLES"
    fi
    RUNS="preln_lm normformer_lm"
    MODEL_FLAGS="--decoder-layers 4 --decoder-embed-dim 128 --decoder-ffn-embed-dim 512 --decoder-attention-heads 4
      --activation-fn gelu --share-decoder-input-output-embed --tokens-per-sample 128 --batch-size 16"
    DEVICE=cpu
    ;;
  paper)
    : "${DATA_BIN:?set DATA_BIN to the fairseq-preprocess output of the pre-training data}"
    : "${SPM_MODEL:?set SPM_MODEL to the SentencePiece model the data was encoded with}"
    : "${TASK_DIR:?set TASK_DIR to the directory of the five task files (see the header)}"
    WORLD_SIZE=${WORLD_SIZE:-8}
    BATCH_SIZE=${BATCH_SIZE:-8}
    TOKENS_PER_SAMPLE=${TOKENS_PER_SAMPLE:-2048}
    TOTAL_TOKENS=${TOTAL_TOKENS:-300000000000}
    FP16_FLAGS=${FP16_FLAGS-"--fp16 --fp16-init-scale 4 --threshold-loss-scale 1 --fp16-scale-window 128"}
    DEVICE=${DEVICE:-cuda}
    RUNS=""
    for SIZE in ${SIZES:-gpt3_small gpt3_medium gpt3_xl gpt3_2_7}; do
      RUNS="$RUNS preln_lm_$SIZE normformer_lm_$SIZE"
    done
    ;;
  *) echo "unknown scale $SCALE (tiny or paper)" >&2; exit 2 ;;
esac

train() {  # RUN -> WORK/RUN/checkpoint_last.pt
  local name=$1 dir=$WORK/$1 lr_var=LR_$1
  if grep -qs "done training" "$dir/train.log"; then
    echo "[table1] $name: trained before, kept"
    return
  fi
  [ -n "$DRY_RUN" ] || mkdir -p "$dir"
  if [ "$SCALE" = tiny ]; then
    local arch=normformer_lm flags="" lr=${!lr_var:-$LR} updates=$MAX_UPDATE warmup=$((MAX_UPDATE / 10))
    [ "$name" = normformer_lm ] && flags="--scale-attn --scale-fc --scale-heads"
    flags="$flags $MODEL_FLAGS --cpu --num-workers 0"
  else
    local arch=$name lr=${!lr_var:-$(default_lr "$name")} batch_tokens=524288 warmup=750
    case $name in *_gpt3_xl | *_gpt3_2_7) batch_tokens=1048576 ;; esac
    local per_step=$((TOKENS_PER_SAMPLE * BATCH_SIZE * WORLD_SIZE))
    local update_freq=$(((batch_tokens + per_step - 1) / per_step))
    local updates=$((TOTAL_TOKENS / (per_step * update_freq)))
    local flags="--tokens-per-sample $TOKENS_PER_SAMPLE --batch-size $BATCH_SIZE --update-freq $update_freq
      --distributed-world-size $WORLD_SIZE $FP16_FLAGS --num-workers 2"
  fi
  echo "[table1] training $name (lr $lr, $updates updates) -> $dir/train.log"
  # shellcheck disable=SC2086  # flags, EXTRA_FLAGS and LAUNCHER are lists of words
  run ${LAUNCHER:-} "$BIN/fairseq-train" "$DATA_BIN" --user-dir "$REPO/fairseq_normformer" \
    --task language_modeling --sample-break-mode none --arch "$arch" $flags \
    --dropout 0.1 --attention-dropout 0.1 --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-8 \
    --weight-decay 0.01 --lr-scheduler polynomial_decay --lr "$lr" --warmup-updates "$warmup" \
    --total-num-update "$updates" --max-update "$updates" --save-dir "$dir" --no-epoch-checkpoints \
    --disable-validation --save-interval-updates 1000 --keep-interval-updates 1 --seed 1 \
    --log-format simple --log-interval 25 $EXTRA_FLAGS --log-file "$dir/train.log" >/dev/null
}

mkdir -p "$WORK/results"
RESULTS=()
for NAME in $RUNS; do
  train "$NAME"
  TASK_ARGS=(--hellaswag "$TASK_DIR/hellaswag.jsonl" --piqa "$TASK_DIR/piqa.jsonl"
             --winogrande "$TASK_DIR/winogrande.jsonl" --openbookqa "$TASK_DIR/openbookqa.jsonl")
  STORYCLOZE=$TASK_DIR/storycloze.csv
  [ -e "$TASK_DIR/storycloze.jsonl" ] && STORYCLOZE=$TASK_DIR/storycloze.jsonl
  run "$BIN/normformer-zero-shot" score --checkpoint "$WORK/$NAME/checkpoint_last.pt" --spm-model "$SPM_MODEL" \
    --data "$DATA_BIN" --name "$NAME" --device "$DEVICE" "${TASK_ARGS[@]}" --storycloze "$STORYCLOZE" \
    --output "$WORK/results/$NAME.json"
  RESULTS+=("$WORK/results/$NAME.json")
done
run "$BIN/normformer-zero-shot" table "${RESULTS[@]}" --output "$WORK/table1.md"

#!/usr/bin/env bash
# Table 2 of the NormFormer paper: fine-tune a pre-trained masked LM on GLUE with fairseq's
# sentence_prediction task, over the paper's learning rates, and report the best dev score per task.
#
#   CHECKPOINT=ckpt/checkpoint_last.pt ARCH=normformer_roberta_base \
#   DATA_BIN=corpus/data-bin SPM_MODEL=corpus/spm.model GLUE_DIR=glue_data OUT=work/table2 \
#   recipes/table2_glue.sh
#
# GLUE_DIR holds the GLUE tasks' TSVs as the GLUE download script lays them out (CoLA/, MNLI/, ...).
# They are tokenized with the pre-training SentencePiece model and binarized with its dictionary
# (recipes/sentence_prediction_data.py), as fairseq's examples/roberta/preprocess_GLUE_tasks.sh does
# with GPT-2 BPE. Per task and learning rate: one fairseq-train run from CHECKPOINT (--restore-file
# with --reset-optimizer --reset-dataloader --reset-meters), batch size, updates and warmup of
# fairseq's RoBERTa GLUE recipe, 10 epochs; recipes/glue_table.py then prints one row per task.
# Runs follow recipes/_run_dir.sh (docs/recipes.md): finished runs (a "done" marker) are skipped, so the
# script can be re-run; every command (data, training, table) is appended to OUT/commands.sh, and
# DRY_RUN=1 prints them and runs none.
#
# Optional: TASKS (default: the paper's Table 2 columns), LRS (default: 1e-5 1e-4 3e-4 1e-3 3e-3 6e-3),
# MODEL_FLAGS (e.g. the sizes of a non-preset model), FP16_FLAGS (default: fairseq's fp16 settings;
# set it empty on a CPU), EXTRA_FLAGS, MAX_EPOCH (10), MAX_POSITIONS (512: the pre-training
# --tokens-per-sample, which sized the position table), and for smoke runs
# BATCH_SIZE, TOTAL_UPDATES, WARMUP_UPDATES, which replace every task's values. RUNS (default OUT/runs)
# holds the runs, so that several checkpoints can share OUT's data (recipes/bert_table5_ablations.sh).
# SEEDS=N fine-tunes every task and LR N times (--seed K in RUNS/TASK/lrLR, then .../lrLR/seedK; the
# table: mean ± std over the seeds).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
source "$HERE/_python.sh"  # PY, BIN
: "${CHECKPOINT:?set CHECKPOINT to the pre-trained fairseq checkpoint}"
: "${ARCH:?set ARCH to the --arch of the checkpoint (e.g. normformer_roberta_base)}"
: "${DATA_BIN:?set DATA_BIN to the pre-training data directory (its dict.txt is used)}"
: "${SPM_MODEL:?set SPM_MODEL to the pre-training SentencePiece model}"
: "${GLUE_DIR:?set GLUE_DIR to the directory of the GLUE tasks}"
: "${OUT:?set OUT to a work directory}"
TASKS=${TASKS:-"CoLA MNLI MRPC QNLI QQP RTE SST-2"}
LRS=${LRS:-"1e-5 1e-4 3e-4 1e-3 3e-3 6e-3"}
MODEL_FLAGS=${MODEL_FLAGS:-}
FP16_FLAGS=${FP16_FLAGS-"--fp16 --fp16-init-scale 4 --threshold-loss-scale 1 --fp16-scale-window 128"}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
MAX_EPOCH=${MAX_EPOCH:-10}
MAX_POSITIONS=${MAX_POSITIONS:-512}
RUNS=${RUNS:-$OUT/runs}
RECIPE=table2
mkdir -p "$OUT"
source "$HERE/_run_dir.sh"
refuse_unread_data  # reads no DATA (its data: see above)

# classes, batch size, updates, warmup, dev metric: fairseq's examples/roberta/README.glue.md
task_settings() {
  case $1 in
    MNLI) echo "3 32 123873 7432 accuracy" ;;
    QNLI) echo "2 32 33112 1986 accuracy" ;;
    QQP) echo "2 32 113272 28318 accuracy" ;;
    RTE) echo "2 16 2036 122 accuracy" ;;
    SST-2) echo "2 32 20935 1256 accuracy" ;;
    MRPC) echo "2 16 2296 137 accuracy" ;;
    CoLA) echo "2 16 5336 320 mcc" ;;
    STS-B) echo "1 16 3598 214 pearson" ;;
    SameDoc) echo "2 16 1250 75 accuracy" ;;  # recipes/sentence_prediction_data.py same-document
    *) echo "unknown task $1" >&2; exit 2 ;;
  esac
}

# BERT reads <s> A </s> B </s> ([CLS] A [SEP] B [SEP]); RoBERTa <s> A </s> </s> B </s>.
case $ARCH in
  *bert*) SEPARATOR=() ;;
  *) SEPARATOR=(--separator-token 2) ;;
esac

for TASK in $TASKS; do
  read -r CLASSES BSZ UPDATES WARMUP METRIC <<<"$(task_settings "$TASK")"
  BSZ=${BATCH_SIZE:-$BSZ}; UPDATES=${TOTAL_UPDATES:-$UPDATES}; WARMUP=${WARMUP_UPDATES:-$WARMUP}
  case $METRIC in
    mcc) METRIC_FLAGS=(--report-mcc) ;;
    pearson) METRIC_FLAGS=(--regression-target --report-pearson-and-spearman) ;;
    *) METRIC_FLAGS=() ;;
  esac
  DATA=$OUT/data/$TASK
  if [ ! -d "$DATA" ]; then  # through run: DRY_RUN=1 prints it and writes no data
    run "$PY" "$HERE/sentence_prediction_data.py" glue "$TASK" "$GLUE_DIR/$TASK" \
      --spm-model "$SPM_MODEL" --dict "$DATA_BIN/dict.txt" --out "$DATA"
  fi
  for RUN_SEED in $(seq "$SEEDS"); do for LR in $LRS; do
    RUN=$(seed_dir "$RUNS/$TASK/lr$LR" "$RUN_SEED")
    if is_done "$RUN"; then
      echo "[table2] $TASK lr=$LR seed $RUN_SEED: done before, skipped"
      continue
    fi
    [ -f "$RUN/train.log" ] && mv "$RUN/train.log" "$RUN/train.log.interrupted-$(date +%s)"
    echo "[table2] $TASK lr=$LR seed $RUN_SEED -> $RUN/train.log"
    # fairseq drops a last batch whose size is not a multiple of --required-batch-size-multiple
    # (default 8), in validation too: 1 scores every dev example.
    # shellcheck disable=SC2086  # MODEL_FLAGS, FP16_FLAGS and EXTRA_FLAGS are lists of flags
    run_in "$RUN" "$RUN/train.log" "$BIN/fairseq-train" "$DATA" --user-dir "$REPO/fairseq_normformer" \
      --restore-file "$CHECKPOINT" --reset-optimizer --reset-dataloader --reset-meters \
      --task sentence_prediction --criterion sentence_prediction --num-classes "$CLASSES" \
      --init-token 0 "${SEPARATOR[@]}" --max-positions "$MAX_POSITIONS" --shorten-method truncate \
      --arch "$ARCH" $MODEL_FLAGS --dropout 0.1 --attention-dropout 0.1 \
      --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-06 --weight-decay 0.1 --clip-norm 0.0 \
      --lr-scheduler polynomial_decay --lr "$LR" --total-num-update "$UPDATES" --warmup-updates "$WARMUP" \
      --batch-size "$BSZ" --required-batch-size-multiple 1 --max-epoch "$MAX_EPOCH" --max-update "$UPDATES" \
      --best-checkpoint-metric "$METRIC" --maximize-best-checkpoint-metric "${METRIC_FLAGS[@]}" \
      --find-unused-parameters --no-save --save-dir "$RUN" --log-format simple --log-interval 100 \
      $FP16_FLAGS --seed "$RUN_SEED" $EXTRA_FLAGS || exit 1
  done; done
done
# shellcheck disable=SC2086  # TASKS is a list
run "$PY" "$HERE/glue_table.py" "$RUNS" --tasks $TASKS

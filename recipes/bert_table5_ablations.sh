#!/usr/bin/env bash
# BERT's Table 5 ablations of the pre-training objective (Devlin et al. 2019): the same data, model
# size and update budget pre-trained three ways, each then fine-tuned on the same downstream task(s).
#
#   recipes/bert_table5_ablations.sh [paper|tiny] [OUT_DIR]      (see recipes/_bert_common.sh)
#
# Rows (OUT_DIR/ROW/pretrain, OUT_DIR/ROW/finetune):
#   mlm_nsp  MLM + NSP: BERT (--task mlm_nsp)
#   no_nsp   No NSP: the same with --no-nsp (single segments, no pooler or NSP head)
#   ltr      LTR & No NSP: normformer_lm, a left-to-right LM of the same size and layer layout, on the
#            same data (--task language_modeling, packed blocks of the same length), fine-tuned as
#            normformer_lm_classifier (RoBERTa's head on the last token)
# Fine-tuning is recipes/table2_glue.sh (fairseq's sentence_prediction from each checkpoint, the best
# dev score over LRS picked on dev; its runs under OUT_DIR/ROW/finetune, its data and commands shared).
# Paper scale: TASKS (default: MNLI QNLI MRPC SST-2, Table 5's GLUE columns) from GLUE_DIR, SPM_MODEL
# the corpus's SentencePiece model, BERT's fine-tuning LRs; tokens per sample 512. Tiny: the SameDoc
# task built from the corpus (recipes/sentence_prediction_data.py same-document), LRS "3e-4 1e-3",
# FT_UPDATES (default 250) updates of batch 16, 128 tokens. UPDATES sets the pre-training budget, ROWS a
# subset of the rows (default: mlm_nsp no_nsp ltr). SEEDS=N: each row pre-trained N times (--seed K), seed K
# fine-tuned from seed K's checkpoint with --seed K, in the row's seed directory (OUT_DIR/ROW/seedK/{pretrain,
# finetune} for K > 1); the table gives mean ± std and each row's difference to the first, paired by seed.
# Writes OUT_DIR/table5_bert.md.
source "$(dirname "$0")/_bert_common.sh"
bert_data
if [ "$SCALE" = paper ]; then
  : "${GLUE_DIR:?set GLUE_DIR to the directory of the GLUE tasks}" "${SPM_MODEL:?set SPM_MODEL to the SentencePiece model of the corpus}"
  UPDATES="${UPDATES:-$BERT_MAX_UPDATE}" TOKENS="$BERT_PHASE2_TOKENS" TASKS="${TASKS:-MNLI QNLI MRPC SST-2}"
  LRS="${LRS:-$BERT_FINETUNE_LRS}" FT_FLAGS=(BATCH_SIZE="$BERT_FINETUNE_BATCH_SIZE" MAX_EPOCH="$BERT_FINETUNE_EPOCHS")
else
  UPDATES="${UPDATES:-300}" TOKENS="$BERT_PHASE1_TOKENS" TASKS=SameDoc LRS="${LRS:-3e-4 1e-3}"
  GLUE_DIR="$OUT/glue" SPM_MODEL="$BERT_CORPUS/spm.model"
  FT_UPDATES="${FT_UPDATES:-250}"
  FT_FLAGS=(TOTAL_UPDATES="$FT_UPDATES" WARMUP_UPDATES=$((FT_UPDATES / 10)) FP16_FLAGS=) FT_EXTRA_FLAGS="--cpu --num-workers 0"
  [ -d "$GLUE_DIR/SameDoc" ] || run "$PY" "$REPO/recipes/sentence_prediction_data.py" same-document "$BERT_CORPUS/raw" \
    --out "$GLUE_DIR/SameDoc"
fi
bert_pretrain_args "$UPDATES"
ROWS="${ROWS:-mlm_nsp no_nsp ltr}"
declare -A LABELS=([mlm_nsp]="MLM + NSP" [no_nsp]="No NSP" [ltr]="LTR & No NSP")
declare -A PRETRAIN_RUN=(
  [mlm_nsp]="$BERT_DATA ${MLM[*]} ${BERT_MODEL[*]} --tokens-per-sample $TOKENS"
  [no_nsp]="$BERT_DATA ${MLM[*]} ${BERT_MODEL[*]} --tokens-per-sample $TOKENS --no-nsp"
  [ltr]="$BERT_DATA --task language_modeling --sample-break-mode none --tokens-per-sample $TOKENS ${LTR_MODEL[*]}"
)
declare -A FINETUNE_MODEL=(  # --arch and model flags of fine-tuning
  [mlm_nsp]="$BERT_ARCH ${BERT_MODEL[*]:2}" [no_nsp]="$BERT_ARCH ${BERT_MODEL[*]:2}"
  [ltr]="normformer_lm_classifier ${LTR_MODEL[*]:2}"  # positions: --max-positions (normformer_lm_classifier)
)
for seed in $(seq "$SEEDS"); do
  for row in $ROWS; do
    # shellcheck disable=SC2086  # a list of flags without spaces inside (paths included)
    train "$(seed_dir "$OUT/$row" "$seed")/pretrain" ${PRETRAIN_RUN[$row]} "${PRETRAIN[@]}" --seed "$seed"
  done
done
wait_runs

finetune() {  # finetune ROW SEED: recipes/table2_glue.sh from the checkpoint of ROW's seed SEED, with --seed SEED
  local model dir
  read -r -a model <<<"${FINETUNE_MODEL[$1]}"
  dir="$(seed_dir "$OUT/$1" "$2")"
  # table2_glue.sh takes the pre-training data as DATA_BIN and refuses a DATA (paper scale's) it would not read
  env -u DATA "${FT_FLAGS[@]}" PY="$PY" DRY_RUN="$DRY_RUN" CHECKPOINT="$dir/pretrain/checkpoints/checkpoint_last.pt" \
    ARCH="${model[0]}" MODEL_FLAGS="${model[*]:1}" DATA_BIN="$BERT_DATA" SPM_MODEL="$SPM_MODEL" GLUE_DIR="$GLUE_DIR" \
    OUT="$OUT" RUNS="$dir/finetune" TASKS="$TASKS" LRS="$LRS" MAX_POSITIONS="$TOKENS" SEEDS=1 \
    EXTRA_FLAGS="${EXTRA_FLAGS:-} ${FT_EXTRA_FLAGS:-} --seed $2" bash "$REPO/recipes/table2_glue.sh" >&2
}
# the first row's seed 1 alone (it binarizes the task data into OUT/data), then the others in parallel
read -r -a rows <<<"$ROWS"
for seed in $(seq "$SEEDS"); do
  for row in "${rows[@]}"; do
    if [ "$seed$row" = "1${rows[0]}" ]; then finetune "$row" "$seed"; continue; fi
    finetune "$row" "$seed" & PIDS+=($!)
    if ((${#PIDS[@]} >= JOBS)); then wait_runs; fi
  done
done
wait_runs
TABLE_ROWS=()
for row in $ROWS; do TABLE_ROWS+=("$row=${LABELS[$row]}"); done
run "$PY" "$REPO/recipes/bert_tables.py" ablations "$OUT" --tasks $TASKS --rows "${TABLE_ROWS[@]}" --out "$OUT/table5_bert.md"

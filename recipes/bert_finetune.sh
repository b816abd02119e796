#!/usr/bin/env bash
# BERT's fine-tuning beyond GLUE at paper scale (Devlin et al. 2019, §4.2-4.4, §5.3, Appendix A.3):
# SQuAD v1.1 and v2.0 (extractive_qa), CoNLL-2003 NER (token_classification) and SWAG
# (sentence_ranking), each fine-tuned from a pre-trained checkpoint with the paper's settings:
#
#   task      lr     batch  epochs  updates (= epochs x train examples / batch)
#   squad1    5e-5   32     3       8,213  (87,599 questions)
#   squad2    5e-5   48     2       5,430  (130,319 questions)
#   conll     5e-5   32     3       1,317  (14,041 sentences; the paper gives no value: its A.3 grid)
#   swag      2e-5   16     3       13,790 (73,546 examples)
#
# Adam with weight decay 0.01, linear warmup over the first 10% of the updates then linear decay
# (polynomial_decay), dropout 0.1, 384 pieces per SQuAD window with stride 128. A batch of extractive
# QA is questions (all windows of each), the paper's is windows: a few more windows per update.
#
#   CHECKPOINT=ckpt/checkpoint_last.pt ARCH=normformer_bert_base DATA_BIN=corpus/data-bin \
#   SPM_MODEL=corpus/spm.model OUT=work/bert_finetune SQUAD1_DIR=... SQUAD2_DIR=... CONLL_DIR=... \
#   SWAG_DIR=... recipes/bert_finetune.sh
#
# The data are the user's download (nothing is fetched here):
#   SQUAD1_DIR: train.json, valid.json = train-v1.1.json, dev-v1.1.json (rajpurkar.github.io/SQuAD-explorer)
#   SQUAD2_DIR: train.json, valid.json = train-v2.0.json, dev-v2.0.json (same site)
#   CONLL_DIR:  train.conll, valid.conll, test.conll = CoNLL-2003 eng.train, eng.testa, eng.testb
#               (Reuters licence: your own copy; www.clips.uantwerpen.be/conll2003/ner/)
#   SWAG_DIR:   train.csv, val.csv (github.com/rowanz/swagaf, data/), binarized by normformer-swag-data
# Then normformer-predict writes the SQuAD predictions on dev (v2.0: the no-answer threshold chosen on
# dev) and the CoNLL predictions on testb. Optional: TASKS (default: all four), MAX_POSITIONS (512:
# the pre-training --tokens-per-sample), MODEL_FLAGS, FP16_FLAGS (default --fp16; empty on a CPU),
# EXTRA_FLAGS. Runs follow recipes/_run_dir.sh (docs/recipes.md); DRY_RUN=1 prints the commands.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
source "$HERE/_python.sh"  # PY, BIN
for setting in CHECKPOINT ARCH DATA_BIN SPM_MODEL OUT; do  # described in the header above
  [ -n "${!setting:-}" ] || { echo "bert_finetune.sh: set $setting (see the script's header)" >&2; exit 2; }
done
TASKS=${TASKS:-"squad1 squad2 conll swag"}
MAX_POSITIONS=${MAX_POSITIONS:-512}
MODEL_FLAGS=${MODEL_FLAGS:-}
FP16_FLAGS=${FP16_FLAGS-"--fp16"}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
RECIPE=bert_finetune
mkdir -p "$OUT"
source "$HERE/_run_dir.sh"
refuse_unread_data  # reads no DATA (its data: see above)
TOKENS=(--spm-model "$SPM_MODEL" --dict "$DATA_BIN/dict.txt")

task_settings() {  # lr, batch size, updates, then the task's data directory and flags
  case $1 in
    squad1) echo "5e-5 32 8213 ${SQUAD1_DIR:?set SQUAD1_DIR} --task extractive_qa --criterion extractive_qa --max-seq-length 384 --doc-stride 128" ;;
    squad2) echo "5e-5 48 5430 ${SQUAD2_DIR:?set SQUAD2_DIR} --task extractive_qa --criterion extractive_qa --max-seq-length 384 --doc-stride 128 --version-2-with-negative" ;;
    conll) echo "5e-5 32 1317 ${CONLL_DIR:?set CONLL_DIR} --task token_classification --criterion token_classification --max-seq-length 128" ;;
    swag) echo "2e-5 16 13790 $OUT/data/swag --task sentence_ranking --criterion sentence_ranking --num-classes 4 --init-token 0 --shorten-method truncate" ;;
    *) echo "unknown task $1 (squad1, squad2, conll, swag)" >&2; exit 2 ;;
  esac
}

for TASK in $TASKS; do
  SETTINGS=$(task_settings "$TASK")  # exits here when the task's data directory is not set
  read -r LR BSZ UPDATES DATA FLAGS <<<"$SETTINGS"
  read -ra FLAGS <<<"$FLAGS"
  case $TASK in
    swag)
      if [ ! -e "$DATA" ] || [ "$DRY_RUN" = 1 ]; then
        run "$PY" -m fairseq_normformer.cli.swag_data "${SWAG_DIR:?set SWAG_DIR}" "${TOKENS[@]}" --out "$DATA"
      fi ;;
    *) FLAGS+=("${TOKENS[@]}") ;;
  esac
  RUN=$OUT/runs/$TASK
  # shellcheck disable=SC2086  # MODEL_FLAGS, FP16_FLAGS and EXTRA_FLAGS are lists of flags
  run_in "$RUN" "$RUN/train.log" "$BIN/fairseq-train" "$DATA" "${FLAGS[@]}" --user-dir "$REPO/fairseq_normformer" \
    --arch "$ARCH" $MODEL_FLAGS --max-positions "$MAX_POSITIONS" --restore-file "$CHECKPOINT" \
    --reset-optimizer --reset-dataloader --reset-meters --optimizer adam --adam-betas "(0.9, 0.999)" \
    --adam-eps 1e-06 --weight-decay 0.01 --lr-scheduler polynomial_decay --lr "$LR" \
    --warmup-updates $((UPDATES / 10)) --total-num-update "$UPDATES" --max-update "$UPDATES" \
    --batch-size "$BSZ" --required-batch-size-multiple 1 --dropout 0.1 --attention-dropout 0.1 \
    --save-dir "$RUN" --no-epoch-checkpoints --log-format simple --log-interval 100 $FP16_FLAGS $EXTRA_FLAGS
  case $TASK in
    squad1) run "$PY" -m fairseq_normformer.cli.predict qa "$RUN/checkpoint_last.pt" "$DATA/valid.json" \
              --out "$RUN/predictions.json" "${TOKENS[@]}" ;;
    squad2) run "$PY" -m fairseq_normformer.cli.predict qa "$RUN/checkpoint_last.pt" "$DATA/valid.json" \
              --out "$RUN/predictions.json" --tune-threshold --null-odds-out "$RUN/null_odds.json" "${TOKENS[@]}" ;;
    conll) run "$PY" -m fairseq_normformer.cli.predict tags "$RUN/checkpoint_last.pt" "$DATA/test.conll" \
             --out "$RUN/predictions.conll" "${TOKENS[@]}" ;;
  esac
done

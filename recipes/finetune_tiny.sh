#!/usr/bin/env bash
# Fine-tuning beyond GLUE at a tiny scale on CPU (minutes): does pre-training help? A tiny BERT
# (mlm_nsp) is pre-trained on the standard-library docstring corpus, then fine-tuned on extractive QA
# (SQuAD v1.1 format), NER (CoNLL tags) and SWAG (sentence_ranking) built from the standard library
# (normformer-build-corpus --format squad|conll|swag), once from the checkpoint (--restore-file with the
# --reset-* flags) and once from scratch: same architecture, data, updates, learning rate and seed.
#
#   recipes/finetune_tiny.sh [WORKDIR]          (default: work/finetune_tiny)
#
# Prints (and writes to WORKDIR/results.md) one table per task (normformer-analyze metric-table): the final
# validation metrics of both and their difference. SEEDS=N fine-tunes both N times (--seed K, WORKDIR/TASK/INIT/seedK
# for K > 1; one pre-training): mean ± std, the difference as a 95% interval paired by seed (docs/analysis.md).
# Each run keeps WORKDIR/TASK/{pretrained,scratch}/checkpoint_best.pt (and _last), which normformer-predict reads.
# Settings through the environment: MAX_CHARS, VOCAB_SIZE (corpus), TASK_CHARS (each task's data),
# SIZE_FLAGS, PRETRAIN_UPDATES, PRETRAIN_LR, FINETUNE_UPDATES (default per task: qa 200, ner 1500,
# swag 200, a few CPU-minutes each; both runs of a task get the same), FINETUNE_LR, TASKS (qa ner swag),
# OMP_NUM_THREADS (1: the two runs of a task go in parallel, one core each). Runs follow
# recipes/_run_dir.sh (docs/recipes.md): finished runs are reused, every command is appended to
# WORKDIR/commands.sh, DRY_RUN=1 prints the commands. Results: docs/results/finetune/.
set -euo pipefail
WORK=${1:-work/finetune_tiny}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
source "$HERE/_python.sh"  # PY, BIN
MAX_CHARS=${MAX_CHARS:-1000000}
VOCAB_SIZE=${VOCAB_SIZE:-2000}
TASK_CHARS=${TASK_CHARS:-300000}
SIZE_FLAGS=${SIZE_FLAGS:-"--encoder-layers 2 --encoder-embed-dim 64 --encoder-ffn-embed-dim 256 --encoder-attention-heads 4"}
PRETRAIN_UPDATES=${PRETRAIN_UPDATES:-2000}
PRETRAIN_LR=${PRETRAIN_LR:-1e-3}
FINETUNE_UPDATES=${FINETUNE_UPDATES:-}
FINETUNE_LR=${FINETUNE_LR:-5e-4}
TASKS=${TASKS:-"qa ner swag"}
TOKENS=128
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
RECIPE=finetune_tiny
OUT=$WORK
mkdir -p "$OUT"
source "$HERE/_run_dir.sh"
ARCH=normformer_bert_base
COMMON=(--user-dir "$REPO/fairseq_normformer" --arch "$ARCH" --dropout 0.1 --attention-dropout 0.1
        --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-06 --weight-decay 0.01 --clip-norm 1.0
        --lr-scheduler polynomial_decay --seed 1 --required-batch-size-multiple 1 --num-workers 0
        --log-format simple --log-interval 50 --cpu)
read -ra SIZE <<<"$SIZE_FLAGS"
CORPUS=$WORK/corpus

# data: the corpus, then each task in its official format (split by module as the corpus)
build() {  # DIR ARGS...: normformer-build-corpus unless DIR exists
  if [ -e "$1" ] && [ "$DRY_RUN" != 1 ]; then return; fi
  run "$PY" -m fairseq_normformer.cli.build_corpus --out "$@"
}
build "$CORPUS" --format bert --vocab-size "$VOCAB_SIZE" --max-chars "$MAX_CHARS"
build "$WORK/data/qa" --format squad --max-chars "$TASK_CHARS"
build "$WORK/data/ner" --format conll --max-chars "$TASK_CHARS"
build "$WORK/data/swag_csv" --format swag --max-chars "$TASK_CHARS"
if [ ! -e "$WORK/data/swag" ] || [ "$DRY_RUN" = 1 ]; then
  run "$PY" -m fairseq_normformer.cli.swag_data "$WORK/data/swag_csv" --spm-model "$CORPUS/spm.model" \
    --dict "$CORPUS/data-bin/dict.txt" --out "$WORK/data/swag"
fi

# pre-training: masked LM + next-sentence prediction (recipes/tiny_mlm_nsp.sh's settings)
PRETRAINED=$WORK/pretrained
run_in "$PRETRAINED" "$PRETRAINED/train.log" "$BIN/fairseq-train" "$CORPUS/data-bin" "${COMMON[@]}" "${SIZE[@]}" \
  --task mlm_nsp --criterion mlm_nsp --tokens-per-sample "$TOKENS" --lr "$PRETRAIN_LR" --batch-size 32 \
  --warmup-updates $((PRETRAIN_UPDATES / 10)) --total-num-update "$PRETRAIN_UPDATES" --max-update "$PRETRAIN_UPDATES" \
  --save-dir "$PRETRAINED" --no-epoch-checkpoints --validate-interval-updates "$PRETRAIN_UPDATES"

task_flags() {  # TASK: its updates, data directory and fairseq flags
  local finetune=(--spm-model "$CORPUS/spm.model" --dict "$CORPUS/data-bin/dict.txt" --max-seq-length "$TOKENS")
  case $1 in
    qa) echo "${FINETUNE_UPDATES:-200} $WORK/data/qa --task extractive_qa --criterion extractive_qa --doc-stride 96 --max-query-length 32 ${finetune[*]}" ;;
    ner) echo "${FINETUNE_UPDATES:-1500} $WORK/data/ner --task token_classification --criterion token_classification ${finetune[*]}" ;;
    swag) echo "${FINETUNE_UPDATES:-200} $WORK/data/swag --task sentence_ranking --criterion sentence_ranking --num-classes 4 --init-token 0 --shorten-method truncate" ;;
  esac
}

finetune() {  # TASK INIT (pretrained|scratch) SEED
  local run updates flags init=()
  run=$(seed_dir "$WORK/$1/$2" "$3")
  read -r updates flags <<<"$(task_flags "$1")"
  read -ra flags <<<"$flags"
  if [ "$2" = pretrained ]; then
    init=(--restore-file "$PRETRAINED/checkpoint_last.pt" --reset-optimizer --reset-dataloader --reset-meters)
  fi
  run_in "$run" "$run/train.log" "$BIN/fairseq-train" "${flags[@]}" "${COMMON[@]}" "${SIZE[@]}" "${init[@]}" \
    --max-positions "$TOKENS" --lr "$FINETUNE_LR" --batch-size 16 --warmup-updates $((updates / 10)) \
    --total-num-update "$updates" --max-update "$updates" --save-dir "$run" --no-epoch-checkpoints \
    --validate-interval-updates $((updates / 3)) --seed "$3"
}

for TASK in $TASKS; do
  for SEED in $(seq "$SEEDS"); do
    pids=()
    for INIT in pretrained scratch; do
      finetune "$TASK" "$INIT" "$SEED" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
  done
done

declare -A METRICS=([qa]="f1 em" [ner]="f1 accuracy" [swag]="accuracy")
declare -A NAMES=([qa]="extractive QA (SQuAD v1.1 format)" [ner]="NER (CoNLL tags)" [swag]="SWAG (sentence_ranking)")
for TASK in $TASKS; do
  TABLE_RUNS=()
  seed_runs pre-trained "$WORK/$TASK/pretrained" train.log
  seed_runs "from scratch" "$WORK/$TASK/scratch" train.log
  for metric in ${METRICS[$TASK]}; do TABLE_RUNS+=(--metric "$metric"); done
  run "$PY" -m fairseq_normformer.cli.analyze metric-table "${TABLE_RUNS[@]}" --title "${NAMES[$TASK]}" \
    --out "$WORK/$TASK/results.md"
done
[ "$DRY_RUN" = 1 ] && exit 0
for TASK in $TASKS; do cat "$WORK/$TASK/results.md"; echo; done | tee "$WORK/results.md"


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
# OMP_NUM_THREADS (1: JOBS=2 runs of a task go in parallel, one core each). Runs follow
# recipes/_run_dir.sh (docs/recipes.md): finished runs are reused, every command is appended to
# WORKDIR/commands.sh, DRY_RUN=1 prints the commands. Results: docs/results/finetune/.
#
# Checkpoints pre-trained elsewhere (e.g. recipes/mlm_small.sh's): CORPUS=DIR, the corpus they were pre-trained on (its
# spm.model and data-bin/dict.txt tokenize the tasks; nothing is built or pre-trained), and
# PRETRAINED="LABEL=ARCH:CHECKPOINT ...": each label fine-tuned from its checkpoint with its --arch, then one run per
# distinct ARCH from scratch ("ARCH, from scratch"), all with SIZE_FLAGS (the checkpoints' size: set it; add
# --no-layernorm-embedding for BERT checkpoints without the embedding LayerNorm) and the same data, updates, LR and
# seeds. A "{seed}/" in CHECKPOINT is seed K's directory (nothing for seed 1, seedK/ after): seed K fine-tunes from
# seed K's pre-training. Runs in WORKDIR/TASK/pretrained-<label>, WORKDIR/TASK/scratch-ARCH;
# tables: TASK/results.md (every run, differences to the first label) and TASK/pretraining-ARCH.md (ARCH from
# scratch first: what each of its checkpoints buys). Use a WORKDIR of its own (data/swag is binarized with CORPUS).
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
JOBS=${JOBS:-2}
TOKENS=128
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
RECIPE=finetune_tiny
OUT=$WORK
source "$HERE/_run_dir.sh"
refuse_unread_data  # reads no DATA (its data: see above)
USER_DIR=(--user-dir "$REPO/fairseq_normformer")
COMMON=(--dropout 0.1 --attention-dropout 0.1
        --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-06 --weight-decay 0.01 --clip-norm 1.0
        --lr-scheduler polynomial_decay --seed 1 --required-batch-size-multiple 1 --num-workers 0
        --log-format simple --log-interval 50 --cpu)
read -ra SIZE <<<"$SIZE_FLAGS"
PRETRAIN_DIR=$WORK/pretrained
bad_input() { echo "$(basename "$0"): error: $*" >&2; exit 2; }

seed_checkpoint() {  # CHECKPOINT SEED: CHECKPOINT with "{seed}/" as seed_dir's (nothing for seed 1, seedK/ after)
  if [ "$2" = 1 ]; then echo "${1//\{seed\}\//}"; else echo "${1//\{seed\}/seed$2}"; fi
}

# the fine-tuning runs, in table order: LABELS, ARCHS, CHECKPOINTS (empty: from scratch), DIRS (under WORKDIR/TASK)
LABELS=() ARCHS=() CHECKPOINTS=() DIRS=() SCRATCH_ARCHS=()
add_init() { LABELS+=("$1") ARCHS+=("$2") CHECKPOINTS+=("$3") DIRS+=("$4"); }
add_pretrained() {  # LABEL=ARCH:CHECKPOINT, an entry of PRETRAINED: checked, then added
  [[ $1 =~ ^([^=]+)=([^:]+):(.+)$ ]] || bad_input "PRETRAINED entry '$1' is not LABEL=ARCH:CHECKPOINT"
  local label=${BASH_REMATCH[1]} arch=${BASH_REMATCH[2]} checkpoint=${BASH_REMATCH[3]} dir seed
  dir=${label,,}
  dir=pretrained-${dir//[^a-z0-9._-]/_}
  [[ " ${DIRS[*]} " != *" $dir "* ]] || bad_input "PRETRAINED label '$label' is given twice (or in another case)"
  for seed in $(seq "$SEEDS"); do
    [ -f "$(seed_checkpoint "$checkpoint" "$seed")" ] ||
      bad_input "$label's checkpoint for seed $seed not found: $(seed_checkpoint "$checkpoint" "$seed")"
  done
  add_init "$label" "$arch" "$checkpoint" "$dir"
  [[ " ${SCRATCH_ARCHS[*]} " == *" $arch "* ]] || SCRATCH_ARCHS+=("$arch")
}
if [ -z "${PRETRAINED:-}" ]; then
  if [ -n "${CORPUS:-}" ]; then bad_input "CORPUS=$CORPUS needs PRETRAINED=\"LABEL=ARCH:CHECKPOINT ...\" (nothing is pre-trained on it)"; fi
  CORPUS=$WORK/corpus
  add_init pre-trained normformer_bert_base "$PRETRAIN_DIR/checkpoint_last.pt" pretrained
  add_init "from scratch" normformer_bert_base "" scratch
else
  if [ -z "${CORPUS:-}" ]; then bad_input "PRETRAINED needs CORPUS=DIR, the corpus its checkpoints were pre-trained on"; fi
  for file in spm.model data-bin/dict.txt; do [ -f "$CORPUS/$file" ] || bad_input "CORPUS=$CORPUS has no $file"; done
  read -ra ENTRIES <<<"${PRETRAINED//$'\n'/ }"  # entries on several lines too
  ((${#ENTRIES[@]})) || bad_input "PRETRAINED has no LABEL=ARCH:CHECKPOINT entry"
  for entry in "${ENTRIES[@]}"; do add_pretrained "$entry"; done
  for arch in "${SCRATCH_ARCHS[@]}"; do add_init "$arch, from scratch" "$arch" "" "scratch-$arch"; done
fi
mkdir -p "$OUT"

# data: the corpus, then each task in its official format (split by module as the corpus)
build() {  # DIR ARGS...: normformer-build-corpus unless DIR exists
  if [ -e "$1" ] && [ "$DRY_RUN" != 1 ]; then return; fi
  run "$PY" -m fairseq_normformer.cli.build_corpus --out "$@"
}
if [ -z "${PRETRAINED:-}" ]; then build "$CORPUS" --format bert --vocab-size "$VOCAB_SIZE" --max-chars "$MAX_CHARS"; fi
build "$WORK/data/qa" --format squad --max-chars "$TASK_CHARS"
build "$WORK/data/ner" --format conll --max-chars "$TASK_CHARS"
build "$WORK/data/swag_csv" --format swag --max-chars "$TASK_CHARS"
if [ ! -e "$WORK/data/swag" ] || [ "$DRY_RUN" = 1 ]; then
  run "$PY" -m fairseq_normformer.cli.swag_data "$WORK/data/swag_csv" --spm-model "$CORPUS/spm.model" \
    --dict "$CORPUS/data-bin/dict.txt" --out "$WORK/data/swag"
fi

# pre-training: masked LM + next-sentence prediction (recipes/tiny_mlm_nsp.sh's settings), unless PRETRAINED
if [ -z "${PRETRAINED:-}" ]; then
  run_in "$PRETRAIN_DIR" "$PRETRAIN_DIR/train.log" "$BIN/fairseq-train" "$CORPUS/data-bin" "${USER_DIR[@]}" \
    --arch normformer_bert_base "${COMMON[@]}" "${SIZE[@]}" --task mlm_nsp --criterion mlm_nsp \
    --tokens-per-sample "$TOKENS" --lr "$PRETRAIN_LR" --batch-size 32 --warmup-updates $((PRETRAIN_UPDATES / 10)) \
    --total-num-update "$PRETRAIN_UPDATES" --max-update "$PRETRAIN_UPDATES" --save-dir "$PRETRAIN_DIR" \
    --no-epoch-checkpoints --validate-interval-updates "$PRETRAIN_UPDATES"
fi

task_flags() {  # TASK: its updates, data directory and fairseq flags
  local finetune=(--spm-model "$CORPUS/spm.model" --dict "$CORPUS/data-bin/dict.txt" --max-seq-length "$TOKENS")
  case $1 in
    qa) echo "${FINETUNE_UPDATES:-200} $WORK/data/qa --task extractive_qa --criterion extractive_qa --doc-stride 96 --max-query-length 32 ${finetune[*]}" ;;
    ner) echo "${FINETUNE_UPDATES:-1500} $WORK/data/ner --task token_classification --criterion token_classification ${finetune[*]}" ;;
    swag) echo "${FINETUNE_UPDATES:-200} $WORK/data/swag --task sentence_ranking --criterion sentence_ranking --num-classes 4 --init-token 0 --shorten-method truncate" ;;
  esac
}

finetune() {  # TASK INIT SEED: fine-tune run INIT (an index of LABELS)
  local run updates flags init=()
  run=$(seed_dir "$WORK/$1/${DIRS[$2]}" "$3")
  read -r updates flags <<<"$(task_flags "$1")"
  read -ra flags <<<"$flags"
  if [ -n "${CHECKPOINTS[$2]}" ]; then
    init=(--restore-file "$(seed_checkpoint "${CHECKPOINTS[$2]}" "$3")" --reset-optimizer --reset-dataloader --reset-meters)
  fi
  run_in "$run" "$run/train.log" "$BIN/fairseq-train" "${flags[@]}" "${USER_DIR[@]}" --arch "${ARCHS[$2]}" "${COMMON[@]}" \
    "${SIZE[@]}" "${init[@]}" --max-positions "$TOKENS" --lr "$FINETUNE_LR" --batch-size 16 \
    --warmup-updates $((updates / 10)) --total-num-update "$updates" --max-update "$updates" --save-dir "$run" \
    --no-epoch-checkpoints --validate-interval-updates $((updates / 3)) --seed "$3"
}

for TASK in $TASKS; do
  for SEED in $(seq "$SEEDS"); do
    for INIT in "${!LABELS[@]}"; do
      if [ "$DRY_RUN" = 1 ]; then finetune "$TASK" "$INIT" "$SEED"; continue; fi
      finetune "$TASK" "$INIT" "$SEED" &
      PIDS+=($!)
      if ((${#PIDS[@]} >= JOBS)); then wait_runs; fi
    done
    wait_runs
  done
done

declare -A METRICS=([qa]="f1 em" [ner]="f1 accuracy" [swag]="accuracy")
declare -A NAMES=([qa]="extractive QA (SQuAD v1.1 format)" [ner]="NER (CoNLL tags)" [swag]="SWAG (sentence_ranking)")
TABLES=()
table() {  # OUT TITLE INIT...: normformer-analyze metric-table of runs INIT of TASK, differences to the first
  local out=$1 title=$2 init metric
  shift 2
  TABLE_RUNS=(--seeds "$SEEDS")
  for init in "$@"; do TABLE_RUNS+=(--run "${LABELS[$init]}=$WORK/$TASK/${DIRS[$init]}/train.log"); done
  for metric in ${METRICS[$TASK]}; do TABLE_RUNS+=(--metric "$metric"); done
  run "$PY" -m fairseq_normformer.cli.analyze metric-table "${TABLE_RUNS[@]}" --title "$title" --out "$out"
  TABLES+=("$out")
}
for TASK in $TASKS; do
  table "$WORK/$TASK/results.md" "${NAMES[$TASK]}" "${!LABELS[@]}"
  for arch in "${SCRATCH_ARCHS[@]}"; do  # ARCH from scratch (the last run of ARCH), then its checkpoints
    inits=()
    for INIT in "${!LABELS[@]}"; do if [ "${ARCHS[$INIT]}" = "$arch" ]; then inits+=("$INIT"); fi; done
    inits=("${inits[-1]}" "${inits[@]:0:${#inits[@]}-1}")
    table "$WORK/$TASK/pretraining-$arch.md" "${NAMES[$TASK]}, $arch: pre-trained vs from scratch" "${inits[@]}"
  done
done
[ "$DRY_RUN" = 1 ] && exit 0
for table in "${TABLES[@]}"; do cat "$table"; echo; done | tee "$WORK/results.md"

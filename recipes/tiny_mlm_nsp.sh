#!/usr/bin/env bash
# Tiny BERT pre-training (masked LM + next-sentence prediction) on 2 CPU cores in under 10 minutes:
# a Pre-LN baseline and NormFormer, same data, seed, learning rate and number of updates.
#
#   recipes/tiny_mlm_nsp.sh [WORKDIR]          (default: work/tiny_mlm_nsp)
#
# Builds the standard-library docstring corpus in BERT's format (one sentence per line, one document
# per module or class), trains preln_bert_base and normformer_bert_base at a tiny size with
# --task mlm_nsp --criterion mlm_nsp (in parallel, one thread each), and prints their final
# validation numbers (WORKDIR/table.md, normformer-analyze metric-table). SEEDS=N trains both N times (--seed K,
# WORKDIR/ARCH/seedK for K > 1): mean ± std and NormFormer's differences as 95% intervals paired by seed
# (docs/analysis.md). Settings can be changed through the environment: MAX_UPDATE, LR, NEGATIVES
# (random, same-document, swap), MAX_CHARS, VOCAB_SIZE, SIZE_FLAGS, EXTRA_FLAGS, OMP_NUM_THREADS.
# Runs follow recipes/_run_dir.sh (docs/recipes.md): finished runs (a "done" marker) are kept and not
# trained again, every command is appended to WORKDIR/commands.sh. Results: docs/masked_lm.md.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
source "$HERE/_python.sh"  # PY, BIN
WORK=${1:-work/tiny_mlm_nsp}
MAX_UPDATE=${MAX_UPDATE:-400}
LR=${LR:-1e-3}
NEGATIVES=${NEGATIVES:-random}
MAX_CHARS=${MAX_CHARS:-1000000}
VOCAB_SIZE=${VOCAB_SIZE:-2000}
SIZE_FLAGS=${SIZE_FLAGS:-"--encoder-layers 4 --encoder-embed-dim 128 --encoder-ffn-embed-dim 512 --encoder-attention-heads 4"}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
RECIPE=tiny_mlm_nsp
OUT=$WORK
mkdir -p "$OUT"
source "$HERE/_run_dir.sh"
refuse_unread_data  # reads no DATA (its data: see above)

"$PY" -m fairseq_normformer.cli.build_corpus --out "$WORK/corpus" --format bert \
  --vocab-size "$VOCAB_SIZE" --max-chars "$MAX_CHARS"

train() {  # ARCH SEED: one single-threaded run, logged to WORK/ARCH/train.log (seed K > 1: WORK/ARCH/seedK/)
  local run
  run=$(seed_dir "$WORK/$1" "$2")
  # shellcheck disable=SC2086  # SIZE_FLAGS and EXTRA_FLAGS are lists of flags
  run_in "$run" "$run/train.log" "$BIN/fairseq-train" "$WORK/corpus/data-bin" --user-dir "$REPO/fairseq_normformer" \
    --task mlm_nsp --criterion mlm_nsp --nsp-negatives "$NEGATIVES" --tokens-per-sample 128 \
    --arch "$1" $SIZE_FLAGS --dropout 0.1 --attention-dropout 0.1 \
    --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-06 --weight-decay 0.01 --clip-norm 1.0 \
    --lr-scheduler polynomial_decay --lr "$LR" --warmup-updates $((MAX_UPDATE / 10)) \
    --total-num-update "$MAX_UPDATE" --max-update "$MAX_UPDATE" --batch-size 32 \
    --validate-interval-updates $((MAX_UPDATE / 4)) --save-interval-updates $((MAX_UPDATE / 4)) \
    --keep-interval-updates 1 --no-epoch-checkpoints --save-dir "$run" --seed "$2" \
    --required-batch-size-multiple 1 --num-workers 0 --log-format simple --log-interval 50 --cpu $EXTRA_FLAGS
}

# The two runs of a seed go in parallel, one thread each (one core each on a 2-core machine).
for SEED in $(seq "$SEEDS"); do
  pids=()
  for ARCH in preln_bert_base normformer_bert_base; do
    if is_done "$(seed_dir "$WORK/$ARCH" "$SEED")"; then
      echo "[tiny_mlm_nsp] $ARCH seed $SEED: done before, kept"
    else
      echo "[tiny_mlm_nsp] training $ARCH seed $SEED -> $(seed_dir "$WORK/$ARCH" "$SEED")/train.log"
      train "$ARCH" "$SEED" &
      pids+=($!)
    fi
  done
  for pid in "${pids[@]}"; do
    wait "$pid"
  done
done

TABLE_RUNS=(--seeds "$SEEDS")
for ARCH in preln_bert_base normformer_bert_base; do TABLE_RUNS+=(--run "$ARCH=$WORK/$ARCH/train.log"); done
for metric in loss mlm_loss mlm_ppl mlm_accuracy nsp_loss nsp_accuracy; do TABLE_RUNS+=(--metric "$metric"); done
"$PY" -m fairseq_normformer.cli.analyze metric-table "${TABLE_RUNS[@]}" --out "$WORK/table.md" >/dev/null
cat "$WORK/table.md"

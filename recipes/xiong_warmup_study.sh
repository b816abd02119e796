#!/usr/bin/env bash
# Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture": Post-LN needs learning-rate
# warmup, Pre-LN trains without it. Four translation runs (fairseq_normformer/paper.py, XIONG_RUNS):
# Post-LN with inverse-sqrt warmup (4000 updates), Post-LN, Pre-LN and NormFormer without warmup, all at
# lr 5e-4 (--lr-scheduler inverse_sqrt_any_warmup --decay-per epoch without warmup: lr through the first
# epoch, then lr / sqrt(epoch)). Validation BLEU (sacrebleu,
# beam 5, lenpen 1.2) after each epoch, test BLEU by fairseq-generate --scoring sacrebleu, and the
# gradient norm of fc2 per layer at initialization (Xiong's Fig. 3). See docs/translation.md.
#
#   recipes/xiong_warmup_study.sh [paper|tiny] [OUT_DIR]
#
# paper: IWSLT14 De-En as fairseq's examples/translation/prepare-iwslt14.sh prepares it (a download on your
#        side), binarized with fairseq-preprocess --joined-dictionary; DATA=that directory. EPOCHS (default 50).
# tiny:  the gettext corpus (normformer-build-corpus --format translation, en-de, English messages of at most
#        6 words, 1000 pieces) and 6+6 layers of width 64, 1024 tokens a batch, single-threaded runs JOBS at a
#        time (default 2), EPOCHS (default 3, about 380 updates each; validation BLEU also every 100 updates),
#        TINY_LR (default 1e-3) in place of 5e-4, TINY_WARMUP (default 100) in place of 4000.
# Writes OUT_DIR/bleu.md, OUT_DIR/bleu.png, OUT_DIR/init_grads.{md,png}; every command goes to
# OUT_DIR/commands.sh; DRY_RUN=1 prints them; finished runs are reused (recipes/_run_dir.sh). SEEDS=N trains and
# tests each run N times (--seed K, OUT_DIR/RUN/seedK for K > 1); bleu.md gives mean ± std over the seeds.
SCALES="paper tiny"  # no small scale: its own shapes
source "$(dirname "$0")/_lm_common.sh"  # REPO, PY, BIN, USER_DIR, SCALE, OUT, run-directory convention, log, wait_runs
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's commands (python -m), not an installed copy
ANALYZE=("$PY" -m fairseq_normformer.cli.analyze)
paper_settings --table xiong

if [ "$SCALE" = paper ]; then
  : "${DATA:?set DATA to IWSLT14 de-en binarized with fairseq-preprocess --joined-dictionary (docs/translation.md)}"
  LANGS=(-s de -t en)
  BLEU_ARGS=(--eval-bleu-detok moses --eval-bleu-remove-bpe)  # prepare-iwslt14.sh: Moses tokens, subword-nmt BPE
  GENERATE_ARGS=(--remove-bpe --batch-size 128)
  SCALE_ARGS=(--max-epoch "${EPOCHS:-50}")
else
  CORPUS="$REPO/work/recipes/corpus-gettext-en-de-v1000-w6"
  run "$PY" -m fairseq_normformer.cli.build_corpus --out "$CORPUS" --format translation --source-lang en \
    --target-lang de --vocab-size 1000 --max-words 6 >&2
  DATA="$CORPUS/data-bin"
  LANGS=(-s en -t de)
  BLEU_ARGS=(--eval-bleu-detok space --eval-bleu-remove-bpe sentencepiece)
  GENERATE_ARGS=(--remove-bpe sentencepiece --batch-size 64 --cpu)
  SCALE_ARGS=(--max-epoch "${EPOCHS:-3}" --validate-interval-updates 100 --encoder-embed-dim 64 --decoder-embed-dim 64 --encoder-ffn-embed-dim 128
    --decoder-ffn-embed-dim 128 --encoder-attention-heads 4 --decoder-attention-heads 4 --max-tokens 1024
    --max-source-positions 64 --max-target-positions 64 --skip-invalid-size-inputs-valid-test --max-valid-steps 4 --batch-size-valid 64 --cpu --num-workers 0)
  XIONG_WARMUP[postln_warmup]="${TINY_WARMUP:-100}"
  for name in "${XIONG_RUNS[@]}"; do XIONG_LR[$name]="${TINY_LR:-1e-3}"; done
fi

# fairseq-train arguments of one run but its schedule (the data directory first); later flags win
model_args() {
  MODEL=("$DATA" --task translation "${LANGS[@]}" --share-all-embeddings --arch "${XIONG_ARCH[$1]}"
    "${XIONG_TRAIN[@]}" --lr "${XIONG_LR[$1]}" --seed 1 "${SCALE_ARGS[@]}" --user-dir "$USER_DIR")
}

# train_and_test RUN SEED: fairseq-train (validation BLEU each epoch), then fairseq-generate on every test pair
# (none skipped, none dropped in a last batch: "Translated N sentences" in generate_test.log is the split size)
train_and_test() {
  local dir
  dir="$(seed_dir "$OUT/$1" "$2")"
  model_args "$1"
  run_in "$dir/train" "$dir/train.log" "$BIN/fairseq-train" "${MODEL[@]}" --seed "$2" --warmup-updates "${XIONG_WARMUP[$1]}" \
    --decay-per "${XIONG_DECAY[$1]}" --eval-bleu --eval-bleu-args '{"beam": 5, "lenpen": 1.2}' "${BLEU_ARGS[@]}" --best-checkpoint-metric bleu \
    --maximize-best-checkpoint-metric --no-epoch-checkpoints --save-dir "$dir/checkpoints" \
    --log-format json --log-interval 10
  run_in "$dir/generate" "$dir/generate_test.log" "$BIN/fairseq-generate" "$DATA" "${LANGS[@]}" --user-dir "$USER_DIR" \
    --path "$dir/checkpoints/checkpoint_best.pt" --gen-subset test "${XIONG_BEAM[@]}" --scoring sacrebleu \
    --required-batch-size-multiple 1 "${GENERATE_ARGS[@]}"
}

for seed in $(seq "$SEEDS"); do for name in "${XIONG_RUNS[@]}"; do
  log "$name: ${XIONG_ARCH[$name]}, lr ${XIONG_LR[$name]}, warmup ${XIONG_WARMUP[$name]}, decay per ${XIONG_DECAY[$name]}, seed $seed -> $(seed_dir "$OUT/$name" "$seed")"
  if [ "$DRY_RUN" = 1 ]; then train_and_test "$name" "$seed"; continue; fi
  train_and_test "$name" "$seed" &
  PIDS+=($!)
  if ((${#PIDS[@]} >= JOBS)); then wait_runs; fi
done; done
wait_runs

# Gradient norm of fc2 per layer at initialization: the three architectures, one training batch
GRAD_RUNS=()
for name in postln_no_warmup preln_no_warmup normformer_no_warmup; do
  model_args "$name"
  run "${ANALYZE[@]}" init-grads "$DATA" --out "$OUT/init_grads/${XIONG_ARCH[$name]}.json" -- \
    "${MODEL[@]:1}" --warmup-updates 0
  GRAD_RUNS+=(--run "${XIONG_ARCH[$name]%%_*}=$OUT/init_grads/${XIONG_ARCH[$name]}.json")
done
run "${ANALYZE[@]}" init-grads-plot "${GRAD_RUNS[@]}" --out-dir "$OUT"

TABLE_RUNS=(--seeds "$SEEDS")
for name in "${XIONG_RUNS[@]}"; do TABLE_RUNS+=(--run "$name=$OUT/$name"); done
run "${ANALYZE[@]}" bleu-table "${TABLE_RUNS[@]}" --out-dir "$OUT"

#!/usr/bin/env bash
# Table 8: Wikitext-103. Baevski & Auli's adaptive-input transformer (preln_lm_wiki103) and its
# NormFormer (normformer_lm_wiki103), trained with fairseq's published Wikitext-103 recipe
# (examples/language_model: NAG, cosine schedule, 286k updates on 8 GPUs), evaluated with
# fairseq-eval-lm on valid and test (context window 400 within blocks of 512).
#
#   recipes/table8_wikitext103.sh [paper|tiny] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Paper scale: DATA = wikitext-103 binarized as fairseq's examples/language_model/README.md does;
# WORLD_SIZE 8 (the recipe's 3072 tokens x update-freq 3 per GPU). Tiny: a 4x64 adaptive-input model
# (cutoffs 500,1000 for the 2k vocabulary) on the docstring corpus, 400 updates, same optimiser.
# SEEDS=N trains and evaluates each model N times (docs/recipes.md). Writes OUT_DIR/table8.md.
SCALES="paper tiny"  # no small scale: its own shapes
source "$(dirname "$0")/_lm_common.sh"
DATA_BIN="$(data_dir)"
OPTIM=(--task language_modeling_analysis --criterion adaptive_loss --sample-break-mode none
  --optimizer nag --lr-scheduler cosine --lr 1.0 --min-lr 0.0001 --t-mult 2 --lr-shrink 0.75 --clip-norm 0.1
  --warmup-init-lr 1e-07 --stop-min-lr 1e-09 --seed 1 --skip-invalid-size-inputs-valid-test --log-format json
  --no-epoch-checkpoints --ddp-backend legacy_ddp)
if [ "$SCALE" = paper ]; then
  COMMON=("$DATA_BIN" "${OPTIM[@]}" --max-tokens 3072 --tokens-per-sample 3072 --update-freq 3
    --distributed-world-size "${WORLD_SIZE:-8}" --max-update 286000 --lr-period-updates 270000
    --warmup-updates 16000 --fp16 --validate-interval-updates 10000
    --save-interval-updates 10000 --keep-interval-updates 2 --log-interval 100)
  BASE=(--arch preln_lm_wiki103) NF=(--arch normformer_lm_wiki103)
  EVAL=(--batch-size 2 --tokens-per-sample 512 --context-window 400)
else
  UPDATES="${UPDATES:-400}"
  COMMON=("$DATA_BIN" "${OPTIM[@]}" --max-tokens 2048 --tokens-per-sample 128 --max-update "$UPDATES"
    --lr-period-updates $((UPDATES * 9 / 10)) --warmup-updates $((UPDATES / 10)) --cpu --num-workers 0
    --validate-interval-updates $((UPDATES / 4)) --save-interval-updates 100000 --log-interval 10
    --decoder-layers 4 --decoder-embed-dim 64
    --decoder-ffn-embed-dim 256 --decoder-attention-heads 4 --adaptive-input-cutoff 500,1000
    --adaptive-softmax-cutoff 500,1000 --dropout 0.1)
  BASE=(--arch preln_lm_wiki103) NF=(--arch normformer_lm_wiki103)
  EVAL=(--batch-size 8 --tokens-per-sample 128 --context-window 64 --cpu --num-workers 0)
fi
train_seeds "$OUT/baseline" "${COMMON[@]}" "${BASE[@]}"
train_seeds "$OUT/normformer" "${COMMON[@]}" "${NF[@]}"
wait_runs
for seed in $(seq "$SEEDS"); do
  for run_dir in "$(seed_dir "$OUT/baseline" "$seed")" "$(seed_dir "$OUT/normformer" "$seed")"; do
    for split in valid test; do
      if [ "$DRY_RUN" = 1 ] || [ ! -s "$run_dir/eval_$split.log" ]; then
        run "$BIN/fairseq-eval-lm" "$DATA_BIN" --user-dir "$USER_DIR" --path "$run_dir/checkpoints/checkpoint_best.pt" \
          --gen-subset "$split" "${EVAL[@]}" >"$run_dir/eval_$split.log" 2>&1
      fi
    done
  done
done
TABLE_RUNS=()
seed_runs Baseline "$OUT/baseline"
seed_runs NormFormer "$OUT/normformer"
analyze eval-table "${TABLE_RUNS[@]}" \
  --title "Table 8, $SCALE scale: fairseq-eval-lm perplexity" --out "$OUT/table8.md"
show_table "$OUT/table8.md"

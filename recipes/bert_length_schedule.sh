#!/usr/bin/env bash
# BERT's two-phase length schedule (Devlin et al. 2019, Appendix A.2): MLM+NSP pre-training at 128
# tokens for 90% of the updates, then at 512 for the last 10% "to learn the positional embeddings".
#
#   recipes/bert_length_schedule.sh [paper|tiny] [OUT_DIR]      (see recipes/_bert_common.sh)
#
# Phase 1 (OUT_DIR/phase1) has a position table for 512 from the start (--max-positions 512; otherwise
# it would get --tokens-per-sample 128 rows and phase 2 could not load it). Phase 2 (OUT_DIR/phase2)
# restores phase 1's last checkpoint with --restore-file: weights, Adam's state, the learning-rate
# schedule and the update count carry on (one schedule over both phases, --total-num-update = all
# updates); only the data loader (--reset-dataloader: its batches are of the other length) and the
# meters start anew. Both checkpoints are then validated at 128 and at 512 tokens (fairseq-validate,
# the same masked examples for both) and OUT_DIR/length_schedule.md tabulates them.
# UPDATES=N sets the total (paper: BERT's 1M; tiny: 300).
source "$(dirname "$0")/_bert_common.sh"
bert_data
TOTAL="${UPDATES:-$([ "$SCALE" = paper ] && echo "$BERT_MAX_UPDATE" || echo 300)}"
PHASE1=$((TOTAL * BERT_PHASE1_PERCENT / 100))
bert_pretrain_args "$TOTAL"
COMMON=("$BERT_DATA" "${MLM[@]}" "${BERT_MODEL[@]}" --max-positions "$BERT_PHASE2_TOKENS"
  "${PRETRAIN[@]}")
# phase 1 stops after PHASE1 updates (its --max-update overrides the total; the schedule spans TOTAL)
train "$OUT/phase1" "${COMMON[@]}" --tokens-per-sample "$BERT_PHASE1_TOKENS" --max-update "$PHASE1"
wait_runs
train "$OUT/phase2" "${COMMON[@]}" --tokens-per-sample "$BERT_PHASE2_TOKENS" \
  --restore-file "$OUT/phase1/checkpoints/checkpoint_last.pt" --reset-dataloader --reset-meters
wait_runs

for phase in phase1 phase2; do
  for tokens in "$BERT_PHASE1_TOKENS" "$BERT_PHASE2_TOKENS"; do
    dir="$OUT/eval/$phase-$tokens"
    run_in "$dir" "$dir/valid.log" "$BIN/fairseq-validate" "$BERT_DATA" --user-dir "$USER_DIR" --task mlm_nsp \
      --path "$OUT/$phase/checkpoints/checkpoint_last.pt" --valid-subset valid --batch-size 16 \
      --required-batch-size-multiple 1 --num-workers 0 --log-format simple \
      --model-overrides "{'tokens_per_sample': $tokens, 'data': '$BERT_DATA'}"
  done
done
run "$PY" "$REPO/recipes/bert_tables.py" length-schedule "$OUT" --short "$BERT_PHASE1_TOKENS" \
  --long "$BERT_PHASE2_TOKENS" --out "$OUT/length_schedule.md"

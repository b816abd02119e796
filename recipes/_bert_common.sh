# Shared by the BERT recipes (bert_table5_ablations.sh, bert_length_schedule.sh); sourced, not run.
#
#   recipes/<recipe>.sh [paper|tiny] [OUT_DIR]
#
# paper: BERT's settings (fairseq_normformer/paper.py BERT, `normformer-paper-settings --bert`): BERT-base
#        (postln_bert_base), 256 sequences per update, Adam at 1e-4, 10k warmup, 1M updates. Needs DATA
#        (fairseq-preprocess output of BERT-format text). WORLD_SIZE GPUs (default 8) x BATCH_SIZE
#        sequences (default 32) x --update-freq = 256.
# tiny:  the same commands scaled down for CPU (OMP_NUM_THREADS=1): the standard-library docstring
#        corpus in BERT's format (built under work/recipes/ on first use), 2 layers x 64 dims,
#        batch 16, UPDATES updates (default 300) at lr 1e-3. Two single-threaded runs go in parallel.
# The run-directory convention is recipes/_run_dir.sh's (through _lm_common.sh): DRY_RUN=1 prints the
# commands, OUT_DIR/commands.sh logs them, finished runs (a "done" marker) are reused.
source "$(dirname "${BASH_SOURCE[0]}")/_lm_common.sh"
eval "$(PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m fairseq_normformer.paper --bert --format shell)"

# bert_data: the BERT-format data-bin (DATA at paper scale, the docstring corpus at tiny scale); sets
# BERT_DATA and, at tiny scale, BERT_CORPUS (its raw/ text and spm.model)
bert_data() {
  if [ "$SCALE" = paper ]; then
    : "${DATA:?set DATA to a fairseq-preprocess output directory of BERT-format text}"
    BERT_DATA="$DATA"
  else
    BERT_CORPUS="$REPO/work/recipes/corpus-bert-v2000"
    [ "$DRY_RUN" = 1 ] || run "$BIN/normformer-build-corpus" --out "$BERT_CORPUS" --format bert --vocab-size 2000 >&2
    BERT_DATA="$BERT_CORPUS/data-bin"
  fi
}

# model_flags SIDE: the model size (BERT-base at paper scale, 2 x 64 at tiny) as --SIDE-* flags
model_flags() {
  local size=(12 768 3072 12)
  [ "$SCALE" = paper ] || size=(2 64 256 4)
  echo "--$1-layers ${size[0]} --$1-embed-dim ${size[1]} --$1-ffn-embed-dim ${size[2]} --$1-attention-heads ${size[3]}"
}

# bert_pretrain_args UPDATES: the arrays BERT_MODEL (BERT's --arch and size), LTR_MODEL (normformer_lm
# as BERT's left-to-right twin: same size, Post-LN with an embedding LayerNorm, GELU, learned unscaled
# positions, tied embeddings), MLM (the mlm_nsp task's masking flags) and PRETRAIN (batch, optimiser,
# schedule, bookkeeping: everything of a run but the task, the model, --tokens-per-sample, the data)
bert_pretrain_args() {
  local updates="$1"
  # shellcheck disable=SC2207  # model_flags prints flags without spaces inside
  BERT_MODEL=(--arch "$BERT_ARCH" $(model_flags encoder) --dropout "$BERT_DROPOUT" --attention-dropout "$BERT_DROPOUT")
  # shellcheck disable=SC2207
  LTR_MODEL=(--arch normformer_lm $(model_flags decoder) --post-ln --layernorm-embedding --activation-fn gelu
    --no-scale-embedding --decoder-learned-pos --share-decoder-input-output-embed
    --dropout "$BERT_DROPOUT" --attention-dropout "$BERT_DROPOUT")
  MLM=(--task mlm_nsp --criterion mlm_nsp --mask-prob "$BERT_MASK_PROB" --short-seq-prob "$BERT_SHORT_SEQ_PROB")
  if [ "$SCALE" = paper ]; then
    local world="${WORLD_SIZE:-8}" bsz="${BATCH_SIZE:-32}"
    if ((BERT_BATCH_SIZE % (world * bsz))); then
      echo "$world GPUs x --batch-size $bsz does not divide BERT's $BERT_BATCH_SIZE sequences per update" >&2
      exit 2
    fi
    PRETRAIN=(--batch-size "$bsz" --update-freq $((BERT_BATCH_SIZE / (world * bsz))) --distributed-world-size "$world"
      --lr "$BERT_LR" --warmup-updates "$BERT_WARMUP_UPDATES" --fp16 --validate-interval-updates 10000
      --save-interval-updates 10000 --keep-interval-updates 2 --log-interval 100)
  else
    PRETRAIN=(--batch-size 16 --lr "${LR:-1e-3}" --warmup-updates $((updates / 10)) --cpu --num-workers 0
      --validate-interval-updates $((updates / 5)) --save-interval-updates $((updates / 5)) --keep-interval-updates 1
      --log-interval 10)
  fi
  PRETRAIN+=("${BERT_OPTIMIZER[@]}" --lr-scheduler polynomial_decay --total-num-update "$updates" --max-update "$updates"
    --required-batch-size-multiple 1 --validate-interval 1000 --no-epoch-checkpoints --seed 1 --log-format simple)
}

# Shared by train_lm.sbatch and train_lm_torchrun.sh (source it from the repository root).
#
# The paper's effective batch (Shleifer et al. 2021, after GPT-3): 0.5M tokens per update for the
# 125M and 355M models, 1M for larger ones, 300B tokens in all. fairseq's tokens per update are
#   world size x --batch-size x --tokens-per-sample x --update-freq
# (with --max-tokens instead of --batch-size: world size x --max-tokens x --update-freq).

TOKENS_PER_SAMPLE=2048
TOTAL_TOKENS=300000000000

paper_tokens_per_update() {  # ARCH
  case "$1" in
    *_gpt3_small | *_gpt3_medium) echo $((1024 * 1024 / 2)) ;;
    *_gpt3_large | *_gpt3_xl | *_gpt3_2_7) echo $((1024 * 1024)) ;;
    *) echo "no paper batch size for --arch $1 (one of the *_gpt3_* presets)" >&2; return 1 ;;
  esac
}

paper_update_freq() {  # ARCH WORLD_SIZE BATCH_SIZE: the --update-freq giving the paper's batch
  local target per_pass
  target=$(paper_tokens_per_update "$1") || return 1
  per_pass=$(($2 * $3 * TOKENS_PER_SAMPLE))
  if ((target % per_pass)); then
    echo "$2 GPUs x --batch-size $3 x $TOKENS_PER_SAMPLE tokens does not divide $target tokens" >&2
    return 1
  fi
  echo $((target / per_pass))
}

# Fills LM_ARGS: the fairseq-train arguments after the data directory, for ARCH, BATCH_SIZE, LR,
# SAVE_DIR on WORLD_SIZE GPUs (USER_DIR: the plugin, by default where normformer-user-dir says),
# and prints the tokens-per-update arithmetic.
lm_train_args() {
  local update_freq tokens_per_update
  update_freq=$(paper_update_freq "$ARCH" "$WORLD_SIZE" "$BATCH_SIZE") || return 1
  tokens_per_update=$((WORLD_SIZE * BATCH_SIZE * TOKENS_PER_SAMPLE * update_freq))
  echo "tokens per update: $WORLD_SIZE GPUs x $BATCH_SIZE x $TOKENS_PER_SAMPLE x $update_freq = $tokens_per_update" >&2
  LM_ARGS=(
    --user-dir "${USER_DIR:-$(normformer-user-dir)}" --task language_modeling --arch "$ARCH"
    --sample-break-mode none --tokens-per-sample "$TOKENS_PER_SAMPLE"
    --batch-size "$BATCH_SIZE" --update-freq "$update_freq" --required-batch-size-multiple 1
    --memory-efficient-fp16 --fp16-init-scale 4
    --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-8 --weight-decay 0.01 --clip-norm 0.0
    --lr "$LR" --lr-scheduler polynomial_decay --warmup-updates 750
    --total-num-update $((TOTAL_TOKENS / tokens_per_update)) --max-update $((TOTAL_TOKENS / tokens_per_update))
    --dropout 0.1 --attention-dropout 0.1 --num-workers 2
    --save-dir "$SAVE_DIR" --save-interval-updates 1000 --no-epoch-checkpoints
    --log-format json --log-interval 100
  )
}

run() {  # the command, or with DRY_RUN=1 its shell-quoted words on one line
  if [[ -n ${DRY_RUN:-} ]]; then printf '%q ' "$@"; echo; else "$@"; fi
}

# Shared by train_lm.sbatch and train_lm_torchrun.sh (source it from the repository root).
#
# Every setting of the paper (Shleifer et al. 2021, after GPT-3) comes from fairseq_normformer/paper.py
# (`normformer-paper-settings --table 6`, docs/recipes.md): 0.5M tokens per update for the 125M and
# 355M models, 1M for larger ones, 300B tokens in all. fairseq's tokens per update are
#   world size x --batch-size x --tokens-per-sample x --update-freq
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=${PY:-$(dirname "$(command -v fairseq-train)")/python}  # the Python that has fairseq
source "$REPO/recipes/_run_dir.sh"

# Fills LM_ARGS: the fairseq-train arguments after the data directory, for ARCH (a *_gpt3_* preset),
# BATCH_SIZE (default: the authors'), LR (default: the paper's for ARCH), SAVE_DIR on WORLD_SIZE GPUs
# (USER_DIR: the plugin, by default where normformer-user-dir says), and prints the tokens-per-update
# and memory arithmetic.
lm_train_args() {
  local model size key flags=(--table 6 --world-size "$WORLD_SIZE")
  case "$ARCH" in
    preln_lm_*) model=baseline size=${ARCH#preln_lm_} ;;
    normformer_lm_*) model=normformer size=${ARCH#normformer_lm_} ;;
    *) echo "no paper settings for --arch $ARCH (one of the *_gpt3_* presets)" >&2; return 1 ;;
  esac
  flags+=(--size "$size" --model "$model")
  if [ -n "${BATCH_SIZE:-}" ]; then flags+=(--batch-size "$BATCH_SIZE"); fi
  if [ "${CPU:-0}" != 1 ]; then flags+=(--gpu-memory "${GPU_MEM_GB:-32}"); fi
  paper_settings "${flags[@]}"
  key="${PAPER_SIZES[0]}/$model"
  LR=${LR:-${PAPER_LRS[$key]}}
  local batch=(${PAPER_BATCH_ARGS[$key]})
  echo "tokens per update: $WORLD_SIZE GPUs x ${PAPER_BATCH_SIZE[$key]} x ${batch[1]} x ${PAPER_UPDATE_FREQ[$key]} = ${PAPER_TOKENS_PER_UPDATE[$key]}" >&2
  eval "LM_ARGS=(${PAPER_MODEL_ARGS[$key]} ${PAPER_BATCH_ARGS[$key]} ${PAPER_OPTIMIZER[*]@Q} ${PAPER_SCHEDULE_ARGS[$key]})"
  if [ "${CPU:-0}" = 1 ]; then
    LM_ARGS+=(--cpu --distributed-backend gloo)
    PORT=${PORT:-$("$PY" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')}
  else
    eval "LM_ARGS+=(${PAPER_PRECISION_ARGS[$key]} ${PAPER_MEMORY_ARGS[$key]})"
  fi
  LM_ARGS+=(
    --user-dir "${USER_DIR:-$(normformer-user-dir)}" --task language_modeling
    --sample-break-mode none --required-batch-size-multiple 1
    --lr "$LR" --num-workers 2
    --save-dir "$SAVE_DIR" --save-interval-updates 1000 --no-epoch-checkpoints
    --log-format json --log-interval 100
  )
}

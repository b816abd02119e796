# Shared by train_lm.sbatch and train_lm_torchrun.sh (source it from the repository root).
#
# Every setting of the paper (Shleifer et al. 2021, after GPT-3) comes from fairseq_normformer/paper.py
# (`normformer-paper-settings --table 6`, docs/recipes.md): 0.5M tokens per update for the 125M and
# 355M models, 1M for larger ones, 300B tokens in all. fairseq's tokens per update are
#   world size x --batch-size x --tokens-per-sample x --update-freq
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${PY:-}" ] && command -v fairseq-train >/dev/null; then  # the Python that has fairseq-train
  PY="$(dirname "$(command -v fairseq-train)")/python"
fi
source "$REPO/recipes/_python.sh"
source "$REPO/recipes/_run_dir.sh"

# lm_train_args DATA_BIN [fairseq-train args]: fills LM_ARGS, the fairseq-train arguments after the data
# directory, for ARCH (a *_gpt3_* preset), BATCH_SIZE (default: the authors'), LR (default: the paper's
# for ARCH), SAVE_DIR on WORLD_SIZE GPUs (USER_DIR: the plugin, by default this one), GPU_MEM_GB or
# CPU=1; prints the memory plan and the tokens per update of LM_ARGS with the user's arguments, which
# the scripts pass after LM_ARGS (fairseq_normformer/runs/launch.py).
lm_train_args() {
  local assignments flags=(--prog "$(basename "$0")" --arch "$ARCH" --processes "$WORLD_SIZE" --save-dir "$SAVE_DIR")
  if [ -n "${BATCH_SIZE:-}" ]; then flags+=(--batch-size "$BATCH_SIZE"); fi
  if [ -n "${LR:-}" ]; then flags+=(--lr "$LR"); fi
  if [ -n "${USER_DIR:-}" ]; then flags+=(--user-dir "$USER_DIR"); fi
  if [ "${CPU:-0}" = 1 ]; then flags+=(--cpu); else flags+=(--gpu-memory "${GPU_MEM_GB:-32}"); fi
  assignments="$(PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m fairseq_normformer.runs.launch "${flags[@]}" -- "$@")" || exit 2
  eval "$assignments"
  if [ "${CPU:-0}" = 1 ]; then
    PORT=${PORT:-$("$PY" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')}
  fi
}

# run_forwarding "SIGNALS" COMMAND...: COMMAND run (DRY_RUN=1: printed) in the background, each of SIGNALS
# (names, space-separated) this script gets forwarded to it; returns COMMAND's exit status. A command in
# the foreground would never get them: bash waits for it, and dies of an untrapped SIGTERM alone.
run_forwarding() {
  local signals=$1 pid name status=0
  shift
  run --background "$@"
  if [ "$DRY_RUN" = 1 ]; then return; fi
  pid=$RUN_PID
  for name in $signals; do trap "kill -$name $pid" "$name"; done
  while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done  # a trapped signal ends a wait early
  wait "$pid" || status=$?
  return $status
}

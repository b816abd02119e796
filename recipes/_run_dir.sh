# The run-directory convention (docs/recipes.md), the shell side of fairseq_normformer/runs/run_dir.py;
# sourced by the recipes and examples/slurm. Needs REPO (the repository root); OUT, when set, is where
# commands.sh is kept.
#   RUN_DIR/done      written once a run's command succeeded; a run that has it is reused, never redone
#   OUT/commands.sh   every command, appended (paths relative to the repository root), after the thread
#                     settings it runs with (export or unset) whenever they differ from the last recorded; a
#                     command with its output in a log as `mkdir -p DIR && COMMAND > LOG 2>&1`, so the file
#                     runs as written in a plain shell and leaves each log where the next commands read it
#   DRY_RUN=1         a command is logged and printed (shell-quoted, one line, on stdout), not run
#   SEEDS=N           each run of a comparing recipe is trained N times (--seed 1..N); seed 1 in RUN_DIR, seed K > 1
#                     in RUN_DIR/seedK (seed_dir), so a finished single-seed run is seed 1 of a study with more; the
#                     seeds are declared in Python: normformer-sweep --seeds N trains them, normformer-analyze --seeds N
#                     reads them (--run LABEL=RUN_DIR/FILE: seed K's RUN_DIR/seedK/FILE)
DRY_RUN="${DRY_RUN:-0}"
DONE_MARKER=done
SEEDS="${SEEDS:-1}"
if ! [[ "$SEEDS" =~ ^[1-9][0-9]*$ ]]; then
  echo "SEEDS must be a positive number of seeds, got '$SEEDS'" >&2
  exit 2
fi

# refuse_unread_data [SCALE]: DATA is read at SCALE only (no SCALE: never); set where the recipe would ignore it
# (and train on a built-in corpus without a word), it is refused in one line
refuse_unread_data() {
  if [ -z "${DATA+set}" ] || { [ -n "${1:-}" ] && [ "$SCALE" = "$1" ]; }; then return 0; fi
  if [ -n "${1:-}" ]; then
    echo "$(basename "$0") ${SCALE}: DATA is read at $1 scale only (${SCALE} builds its own corpus): unset DATA or run $1" >&2
  else
    echo "$(basename "$0"): DATA is set, but this recipe does not read it: unset DATA" >&2
  fi
  exit 2
}

seed_dir() { if [ "$2" = 1 ]; then echo "$1"; else echo "$1/seed$2"; fi; }  # seed_dir RUN_DIR K

# The environment that changes numbers (the thread count changes the order of float sums); as THREAD_VARIABLES
# of fairseq_normformer/runs/run_dir.py
THREAD_VARIABLES=(OMP_NUM_THREADS MKL_NUM_THREADS)

thread_settings() {
  local name value
  for name in "${THREAD_VARIABLES[@]}"; do
    if value="$(printenv "$name")"; then printf 'export %s=%q\n' "$name" "$value"; else echo "unset $name"; fi
  done
}

# record_command LINE: LINE appended to OUT/commands.sh, after the thread settings when they differ from the last recorded
record_command() {
  local log="$OUT/commands.sh" settings recorded
  settings="$(thread_settings)"
  recorded="$(grep -E '^(export|unset) ' "$log" 2>/dev/null | tail -n "${#THREAD_VARIABLES[@]}" || true)"
  if [ "$settings" != "$recorded" ]; then echo "$settings" >>"$log"; fi
  echo "$1" >>"$log"
}

# one_seed ARGS...: into the array ONE_SEED, ARGS without each --seed VALUE but the last, which fairseq's parser
# takes anyway (a run's --seed K comes after the shared flags' --seed 1)
one_seed() {
  local i last=-1 args=("$@")
  for i in "${!args[@]}"; do if [ "${args[$i]}" = --seed ]; then last=$i; fi; done
  ONE_SEED=()
  for ((i = 0; i < ${#args[@]}; i++)); do
    if [ "${args[$i]}" = --seed ] && ((i != last)); then i=$((i + 1)); else ONE_SEED+=("${args[$i]}"); fi
  done
}

# run [--log LOG | --background] COMMAND...: COMMAND recorded in OUT/commands.sh and run (DRY_RUN=1: printed
# instead), with --log its output (stdout and stderr) in LOG, with --background in the background (its
# process id in RUN_PID)
run() {
  local line log="" background=0
  if [ "$1" = --log ]; then log="$2" && shift 2; fi
  if [ "$1" = --background ]; then background=1 && shift; fi
  one_seed "$@"
  line="$(printf '%q ' "${ONE_SEED[@]}")"
  if [ -n "$log" ]; then line="$(printf 'mkdir -p %q && %s> %q 2>&1' "$(dirname "$log")" "$line" "$log")"; fi
  if [ -n "${OUT:-}" ]; then record_command "${line//$REPO\//}"; fi
  if [ "$DRY_RUN" = 1 ]; then echo "$line"; return; fi
  if [ "$background" = 1 ]; then "${ONE_SEED[@]}" & RUN_PID=$!; return; fi
  if [ -z "$log" ]; then "${ONE_SEED[@]}"; return; fi
  mkdir -p "$(dirname "$log")" && "${ONE_SEED[@]}" >"$log" 2>&1
}

# PIDS: the runs a recipe started in the background; wait_runs waits for them all, and fails if one failed
PIDS=()
wait_runs() {
  local pid status=0
  for pid in "${PIDS[@]}"; do wait "$pid" || status=1; done
  PIDS=()
  return $status
}

is_done() { [ -e "$1/$DONE_MARKER" ]; }
mark_done() { touch "$1/$DONE_MARKER"; }

# run_in RUN_DIR LOG COMMAND...: COMMAND with its output in LOG, then RUN_DIR/done; a finished run is reused
run_in() {
  local dir="$1" log="$2"
  shift 2
  if is_done "$dir"; then echo "[${RECIPE:-run}] $(basename "$dir"): finished before, reused" >&2; return; fi
  if [ "$DRY_RUN" = 1 ]; then run --log "$log" "$@"; return; fi
  mkdir -p "$dir"
  if ! run --log "$log" "$@"; then
    echo "[${RECIPE:-run}] $(basename "$dir") failed; see $log" >&2
    return 1
  fi
  mark_done "$dir"
}

# paper_settings normformer-paper-settings-ARGS...: eval the PAPER_* arrays of fairseq_normformer/paper.py,
# the one source of the paper's settings (run with PY, the repository first on the path)
paper_settings() {
  local settings
  settings="$(PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m fairseq_normformer.paper --format shell "$@")" || exit 2
  eval "$settings"
}

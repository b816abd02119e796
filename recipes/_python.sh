# The Python the recipes and examples/slurm run (sourced; needs REPO): PY if set, else the repository's
# .venv, else the python on PATH (an environment of your own, activated). BIN: its console scripts.
# A Python that cannot import fairseq_normformer is refused in one line (docs/recipes.md#which-python).
if [ -z "${PY:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"; else PY="$(command -v python || command -v python3 || echo python)"; fi
fi
# (sys.path's "", the current directory, is left out: a checkout is not an installed plugin)
if ! "$PY" -c 'import importlib.util, sys; sys.path[:] = filter(None, sys.path); sys.exit(importlib.util.find_spec("fairseq_normformer") is None)' 2>/dev/null; then
  echo "$(basename "$0"): error: PY=$PY cannot import fairseq_normformer: set PY to the python of an environment that has it (bash scripts/install.sh path/to/python), or activate one" >&2
  exit 2
fi
BIN="$(dirname "$PY")"

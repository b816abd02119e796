#!/usr/bin/env bash
# The GPU check (docs/gpu.md), on a GPU host from the repository root, with gpu_wheels/ carried
# (scripts/gpu/fetch_wheels.sh fills it):
#   bash scripts/gpu/run.sh [--dry-run] OUT_DIR
# 1. installs the wheels with pip install --no-deps --target into a folder (PIP_TARGET_DIR, default
#    work/gpu/site): numpy 1.26 only over a numpy 2; the folder is made a site directory by a sitecustomize.py,
#    so that the start-up hook's .pth there (fairseq_normformer/fixes/startup.py) runs in every process;
#    console scripts (fairseq-*, normformer-*) go to work/gpu/bin, put on PATH;
# 2. runs the stages of benchmarks/gpu_check.py, each in its own process under its own time cap (timeout),
#    each writing OUT_DIR/STAGE.json and OUT_DIR/STAGE.log; a failing stage does not stop the next.
# --dry-run: on a CPU machine, each stage's plumbing (docs/gpu.md says what runs and what is skipped).
# GPU_STAGES (default: all, in this order) names the stages to run, e.g. GPU_STAGES="cuda_tests kernels".
set -uo pipefail
DRY_RUN=()
if [ "${1:-}" = "--dry-run" ]; then DRY_RUN=(--dry-run); shift; fi
if [ $# -ne 1 ]; then echo "usage: bash scripts/gpu/run.sh [--dry-run] OUT_DIR" >&2; exit 2; fi
mkdir -p "$1" && OUT=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
REPO=$PWD
PY=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-$REPO/gpu_wheels}
WORK=${GPU_WORK:-$REPO/work/gpu}
SITE=${PIP_TARGET_DIR:-$WORK/site}
START=$(date +%s)
mkdir -p "$WORK/bin"

log() { echo "[gpu $(( $(date +%s) - START ))s] $*" | tee -a "$OUT/run.log"; }

install() {
  if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "run.sh: no wheels in $WHEELS: run scripts/gpu/fetch_wheels.sh first (and carry the folder)"; return 1
  fi
  local wheels=() numpy_major
  numpy_major=$("$PY" -c "import numpy; print(numpy.__version__.split('.')[0])" 2>/dev/null || echo none)
  for w in "$WHEELS"/*.whl; do
    case "$(basename "$w")" in numpy-*) [ "$numpy_major" = 1 ] && continue ;; esac
    wheels+=("$w")
  done
  echo "host numpy: $numpy_major; installing $(basename -a "${wheels[@]}" | tr '\n' ' ')"
  local unpacked=("${wheels[@]}")  # unpacked by site_dir.py where the host has no pip
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-index --upgrade --target "$SITE" "${wheels[@]}" || return 1
    unpacked=()
  fi
  mkdir -p "$SITE"
  "$PY" scripts/gpu/site_dir.py "$SITE" "$WORK/bin" "${unpacked[@]}" || return 1
  "$PY" fairseq_normformer/fixes/startup.py "$SITE" || return 1
}

export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$WORK/bin:$PATH"
export PYTHONUNBUFFERED=1
log "install into $SITE"
install > "$OUT/install.log" 2>&1 || log "install failed: $(tail -1 "$OUT/install.log")"

# stage: cap in seconds (the whole run within 8 minutes on an H100: see docs/gpu.md)
STAGE_CAPS=(environment:45 cuda_tests:140 speed_125m:200 kernels:75)
STAGES=" ${GPU_STAGES:-environment cuda_tests speed_125m kernels norm_bench} "
SCALE=1  # the dry run's caps are twice the GPU's: a shared 2-core CPU starts a fairseq process in 5-30 s
[ ${#DRY_RUN[@]} -gt 0 ] && SCALE=2
for entry in "${STAGE_CAPS[@]}"; do
  stage=${entry%%:*} cap=$(( ${entry#*:} * SCALE ))
  [[ "$STAGES" == *" $stage "* ]] || continue
  log "$stage (cap ${cap}s)"
  timeout -k 10 "$cap" "$PY" -m benchmarks.gpu_check "$stage" "$OUT" --work "$WORK" --seconds $((cap - 45)) \
    "${DRY_RUN[@]}" > "$OUT/$stage.log" 2>&1
  "$PY" -m benchmarks.gpu_check finish "$OUT" --finished-stage "$stage" --returncode $? | tee -a "$OUT/run.log"
done
# the minutes left, up to 8 in all, go to the normalization bench
[[ "$STAGES" == *" norm_bench "* ]] || { log "done: $OUT"; exit 0; }
left=$(( ${GPU_TOTAL_SECONDS:-480} * SCALE - ($(date +%s) - START) - 15 ))
[ "$left" -lt 20 ] && left=20
log "norm_bench (cap ${left}s)"
timeout -k 10 "$left" "$PY" -m benchmarks.gpu_check norm_bench "$OUT" --work "$WORK" --seconds $((left - 20)) \
  "${DRY_RUN[@]}" > "$OUT/norm_bench.log" 2>&1
"$PY" -m benchmarks.gpu_check finish "$OUT" --finished-stage norm_bench --returncode $? | tee -a "$OUT/run.log"
log "done: $OUT"

#!/usr/bin/env bash
# Download the wheels a GPU host lacks (docs/gpu.md), at the versions requirements/base.txt pins, into an ignored
# folder that travels with scripts/gpu/run.sh; print the size that travels (the tracked files + the wheels).
#   scripts/gpu/fetch_wheels.sh [--python-version 3.12] [--out gpu_wheels]
# The host has torch, triton, transformers, sentencepiece, sacrebleu, matplotlib and pytest (with their own
# requirements: numpy, regex, tqdm, PyYAML, packaging, filelock). It lacks fairseq (ve-fairseq), hydra-core,
# omegaconf, antlr4-python3-runtime and bitarray. pytest-xdist and execnet (100 kB) run the CUDA tests' 50 fairseq-train
# processes 6 at a time, within the stage's cap. numpy 1.26 travels too: run.sh installs it only over a numpy 2
# (fairseq's translation and token-block datasets use np.compat, which numpy 2 removed). scikit-learn and SciPy
# (47 MB) stay behind: fairseq's start-up defers them (fairseq_normformer/fixes/startup.py) and no stage calls them.
set -euo pipefail
PY_VERSION=3.12
OUT=gpu_wheels
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) PY_VERSION=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "fetch_wheels.sh: unknown argument $1 (usage: fetch_wheels.sh [--python-version X.Y] [--out DIR])" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
LIMIT=$((64 * 1024 * 1024))
ABI=cp${PY_VERSION/./}
pinned() { grep -hE "^$1==" requirements/base.txt requirements/test.txt; }
# pip's own exit status decides (pipefail); only its noise about the missing local index folders is dropped
quiet() { "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; }

mkdir -p "$OUT"
find "$OUT" -maxdepth 1 -name '*.whl' -delete
quiet "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --dest "$OUT" \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --python-version "$PY_VERSION" \
  --implementation cp --abi "$ABI" \
  "$(pinned ve-fairseq)" "$(pinned hydra-core)" "$(pinned omegaconf)" "$(pinned bitarray)" "$(pinned numpy)" \
  "$(pinned pytest-xdist)" "$(pinned execnet)"
# antlr4-python3-runtime 4.9.3 (omegaconf's parser) is an sdist only: a pure-Python wheel built here
quiet "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir "$OUT" "$(pinned antlr4-python3-runtime)"

tracked=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
wheels=$(stat -c %s "$OUT"/*.whl | awk '{s += $1} END {print s + 0}')
total=$((tracked + wheels))
ls -1 "$OUT"
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "travels: $(mib "$total") (the working tree's files $(mib "$tracked") + $(ls "$OUT"/*.whl | wc -l) wheels in $OUT/ $(mib "$wheels")), limit 64 MiB"
if [ "$total" -ge "$LIMIT" ]; then
  echo "fetch_wheels.sh: $(mib "$total") would travel, over the 64 MiB limit" >&2
  exit 1
fi

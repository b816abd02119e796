#!/usr/bin/env bash
# Install fairseq-normformer and everything it needs into the environment of PYTHON.
#   scripts/install.sh [PYTHON] [--test]
# --test also installs the test requirements and the fsdp extra (requirements/fsdp.txt: fairscale, for
# --ddp-backend fully_sharded; without --test: pip install --no-deps -r requirements/fsdp.txt).
# - torch: an existing torch (e.g. a CUDA build on a GPU host) is kept; otherwise torch==2.13.0
#   is installed (a CPU wheel on the CI machines). A constraint pins the installed torch so that
#   no later step can replace it with another build.
# - fairseq comes from the ve-fairseq wheel (upstream main + the Python 3.11 fix), installed with
#   --no-deps: its torchaudio requirement would pull a CUDA torch. Its real needs are pinned in
#   requirements/base.txt.
# - triton is installed only when none is importable (CUDA torch builds ship their own).
set -euo pipefail
PY=${1:-python3}
WITH_TEST=${2:-}
cd "$(dirname "$0")/.."
# pip's own exit status decides (pipefail); only its noise about missing local index folders is dropped.
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; }

# torch's version from its package metadata: importing torch before NumPy is installed warns "Failed to initialize NumPy"
torch_version() { "$PY" -c "from importlib.metadata import version; print(version('torch'))" 2>/dev/null || true; }

TORCH_VERSION=$(torch_version)
if [ -z "$TORCH_VERSION" ]; then
  echo "[install] no torch found: installing torch==2.13.0"
  pip_install torch==2.13.0
  TORCH_VERSION=$(torch_version)
fi
echo "[install] using torch $TORCH_VERSION"
CONSTRAINTS=$(mktemp)
echo "torch==$TORCH_VERSION" > "$CONSTRAINTS"

grep -v '^ve-fairseq' requirements/base.txt > "$CONSTRAINTS.base"
pip_install -c "$CONSTRAINTS" -r "$CONSTRAINTS.base"
pip_install --no-deps "$(grep '^ve-fairseq' requirements/base.txt)"
pip_install --no-deps -e .
# fairseq imports scikit-learn and SciPy at start-up for a few GLUE metric functions (~1 s of every process's
# start): a .pth file defers them to their first call, keeps the CLIs' INFO logging and spares them hydra's warnings
# about fairseq's code (fairseq_normformer/fixes/startup.py).
"$PY" fairseq_normformer/fixes/startup.py
if [ "$WITH_TEST" = "--test" ]; then
  if "$PY" -c "import triton" 2>/dev/null; then
    grep -v '^triton' requirements/test.txt > "$CONSTRAINTS.test"
  else
    cp requirements/test.txt "$CONSTRAINTS.test"
  fi
  pip_install -c "$CONSTRAINTS" -c requirements/base.txt -r "$CONSTRAINTS.test"
  pip_install --no-deps -r requirements/fsdp.txt
  # fairseq imports fairscale at start-up, before any plugin code runs, and fairscale's import then warns
  # twice about its own use of torch.cuda.amp: filtered (those two messages only) at interpreter start.
  cp scripts/fairscale_warnings.pth "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
fi
rm -f "$CONSTRAINTS" "$CONSTRAINTS.base" "$CONSTRAINTS.test"
"$PY" -c "import fairseq, fairseq_normformer, numpy, torch; print('[install] fairseq', fairseq.__version__, '| numpy', numpy.__version__, '| torch', torch.__version__)"

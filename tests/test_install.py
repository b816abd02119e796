"""scripts/install.sh into an environment that has torch but not yet NumPy (the CI machines' start), with pip
stubbed: the script reads torch's version without importing torch, which then warned "Failed to initialize NumPy"."""
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, python_warnings

# A python that hides NumPy until pip has run (a package raising ModuleNotFoundError first on the path) and
# logs pip's arguments instead of installing.
STUB = """#!/usr/bin/env bash
if [ "$1 $2" = "-m pip" ]; then echo "$*" >> "$STUB_DIR/pip.log"; exit 0; fi
if [ ! -e "$STUB_DIR/pip.log" ]; then export PYTHONPATH="$STUB_DIR/hidden${PYTHONPATH:+:$PYTHONPATH}"; fi
exec "$REAL_PYTHON" "$@"
"""


@pytest.mark.slow
def test_install_prints_no_warnings_and_pins_the_installed_torch(tmp_path):
    import torch

    (tmp_path / "hidden" / "numpy").mkdir(parents=True)
    (tmp_path / "hidden" / "numpy" / "__init__.py").write_text("raise ModuleNotFoundError(name='numpy')\n")
    python = tmp_path / "python"
    python.write_text(STUB)
    python.chmod(0o755)
    env = {**os.environ, "STUB_DIR": str(tmp_path), "REAL_PYTHON": sys.executable}
    result = subprocess.run(["bash", REPO_ROOT / "scripts" / "install.sh", python], env=env, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert python_warnings(result.stdout, result.stderr) == []
    assert f"[install] using torch {torch.__version__}" in result.stdout  # no torch install: the one there is kept
    pip = (tmp_path / "pip.log").read_text().splitlines()
    assert not any("torch==" in line for line in pip) and pip[-1].endswith("--no-deps -e .")

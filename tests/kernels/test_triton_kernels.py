"""Runs the Triton kernel tests (tests/kernels/triton_cases) on CPU, in Triton's interpreter, in a
pytest process of their own: TRITON_INTERPRET=1 must be set before the kernels are decorated and
must not leak into this session."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

CASES = Path(__file__).resolve().parent / "triton_cases"
REPO_ROOT = CASES.parents[2]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="this session already interprets")
def test_triton_kernels_in_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout[-10000:]}\n{result.stderr[-4000:]}"
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]

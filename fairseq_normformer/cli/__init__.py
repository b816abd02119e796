"""The console scripts (setup.py's entry points) and ``script``, which finds a console script to run."""
import shutil
import sys
from pathlib import Path


def script(name: str) -> str:
    """The console script ``name`` (fairseq-train, normformer-export-hf) of this Python's environment, else
    the one on PATH: a ``pip install --target`` folder keeps its scripts elsewhere (scripts/gpu/run.sh)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or str(here))

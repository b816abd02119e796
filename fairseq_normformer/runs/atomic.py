"""Directories written whole or not at all."""
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(out_dir):
    """Yield a sibling ``.<name>.tmp-<random>`` directory to build into; when the block succeeds it is
    renamed to ``out_dir`` (an empty ``out_dir`` is replaced), so ``out_dir`` is complete or absent.
    The temporary directory is removed in every case; callers check ``out_dir`` beforehand."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    try:
        yield tmp
        if out_dir.exists():
            out_dir.rmdir()  # only an empty one
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

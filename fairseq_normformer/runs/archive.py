"""A sweep's settled runs kept without their checkpoints (normformer-sweep --archive DIR, docs/cluster.md), so that a
study longer than one machine's life continues on another: each run directory whose point is done or diverged is
DIR/CORPUS/RUN.tar.xz (RUN: its path under --out), CORPUS naming the data it trained on (corpus_id). A later call
restores the runs of its own corpus into its --out and trains the rest; runs on another corpus stay where they are,
with a line saying so, so that no table pairs runs of two corpora. The archives are byte-for-byte the same for the
same files (sorted members, no times or owners), so keeping a run again changes nothing under git.
"""
import hashlib
import io
import os
import re
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List

SUFFIX = ".tar.xz"
LEFT_OUT = ("checkpoints",)  # a run directory's folders not kept (with its seeds' directories, runs of their own)


def corpus_id(data: Path) -> str:
    """The first 12 hex digits of the SHA-256 of a fairseq-preprocess directory's files (names, sizes, bytes), its
    logs left out (preprocess.log names the paths it was built in)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(data).iterdir() if p.is_file() and p.suffix != ".log"):
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


def kept_files(run_dir: Path) -> Iterator[Path]:
    """The files of a run directory an archive keeps, sorted: all but its checkpoints and its seeds' directories."""
    for path in sorted(run_dir.iterdir()):
        if path.is_dir() and (path.name in LEFT_OUT or re.fullmatch(r"seed\d+", path.name)):
            continue
        if path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if p.is_file() and not p.name.endswith(".pt"))
        elif path.is_file() and not path.name.endswith(".pt"):
            yield path


@dataclass
class Archive:
    """The archive DIR of the runs under ``out`` trained on the corpus ``corpus`` (corpus_id)."""

    root: Path
    corpus: str
    out: Path

    def path(self, run_dir: Path) -> Path:
        return self.root / self.corpus / f"{Path(run_dir).relative_to(self.out)}{SUFFIX}"

    def keep(self, run_dir: Path):
        """``run_dir``'s kept files as its archive, replaced whole (written beside it, then renamed)."""
        run_dir, target = Path(run_dir), self.path(run_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        with tarfile.open(partial, "w:xz", format=tarfile.PAX_FORMAT) as tar:
            for path in kept_files(run_dir):
                info = tarfile.TarInfo(str(path.relative_to(run_dir)))
                data = path.read_bytes()
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(partial, target)

    def update(self, run_dir: Path):
        """keep ``run_dir`` unless its archive is newer than each of its kept files (restored files date from 1970)."""
        target, files = self.path(run_dir), list(kept_files(Path(run_dir)))
        if not target.exists() or max(f.stat().st_mtime for f in files) > target.stat().st_mtime:
            self.keep(run_dir)

    def archived(self) -> List[Path]:
        """The run directories under ``out`` that this corpus's archives hold."""
        top = self.root / self.corpus
        return sorted(self.out / str(p.relative_to(top))[: -len(SUFFIX)] for p in top.rglob(f"*{SUFFIX}"))

    def restore(self) -> int:
        """Each archived run into its directory under ``out``, where that holds no file yet (a run started here is
        left to finish here); the number restored. A line names the archives of other corpora, which are not used."""
        restored = 0
        for run_dir in self.archived():
            if run_dir.is_dir() and any(p.is_file() for p in run_dir.iterdir()):
                continue
            try:
                with tarfile.open(self.path(run_dir), "r:xz") as tar:
                    tar.extractall(run_dir, filter="data")
            except tarfile.TarError as e:
                raise ValueError(f"{self.path(run_dir)}: not an archive of a run ({e}): remove it to train the run again")
            restored += 1
        others = sorted(p.name for p in self.root.iterdir() if p.is_dir() and p.name != self.corpus) if self.root.is_dir() else []
        if others:
            print(f"normformer-sweep: {self.root} also holds runs on another corpus ({', '.join(others)}), not used: "
                  f"this sweep's corpus is {self.corpus}", file=sys.stderr)  # fmt: skip
        return restored

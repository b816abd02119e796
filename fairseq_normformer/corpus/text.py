"""Your own plain text as a corpus (``normformer-build-corpus --text FILE... | --text-dir DIR``, docs/data.md).

Each file is read as UTF-8, in the order given (``--text-dir``: every file under DIR, sorted by path).
A **document** is a run of non-blank lines: blank lines separate documents, and a document's lines are
joined with single spaces (hard-wrapped text reads as one paragraph). The held-out rule: numbering the
documents 1, 2, 3, ... across the files, every 20th (20, 40, ...) goes to test, the one before it (19,
39, ...) to valid, the rest to train: 90/5/5 by documents, whole documents only. The corpus is then built
as the docstring corpus (stdlib.py): 'lm' writes one document a line, 'bert' one sentence a line with an
empty line between documents; SentencePiece on train; fairseq-preprocess. ``dedup`` first leaves out every
document whose text is an exact copy of an earlier one's. The statistics record the documents of valid and
test whose text is also a train document's (``held_out_in_train``), and how many copies ``dedup`` left out.
"""
import hashlib
from pathlib import Path
from typing import Sequence

from .pipeline import SPLITS, CorpusPaths, build_or_reuse
from .stdlib import SPLIT_PERCENT, Document, build_from_documents, cap_chars, check_args

HELD_OUT_EVERY = 20  # of every 20 documents, the 19th is valid and the 20th test


def text_files(files: Sequence, text_dir=None) -> list:
    """The ``files`` and, with ``text_dir``, every file under it (sorted), as absolute paths."""
    paths = [Path(f) for f in files]
    if text_dir is not None:
        if not Path(text_dir).is_dir():
            raise FileNotFoundError(f"--text-dir {text_dir}: not a directory")
        paths += sorted(p for p in Path(text_dir).rglob("*") if p.is_file())
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    if not paths:
        raise ValueError("no text: name files with --text or a directory with --text-dir")
    return [p.absolute() for p in paths]


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte {e.start}); convert it, e.g. with iconv") from None


def file_documents(path: Path, text: str) -> list:
    """[Document] of a file's text: each run of non-blank lines, whitespace collapsed."""
    blocks, lines = [], []
    for line in text.splitlines() + [""]:
        if line.strip():
            lines.append(line)
        elif lines:
            blocks.append(" ".join(" ".join(lines).split()))
            lines = []
    return [Document(str(path), [block]) for block in blocks]


def split_of_position(number: int) -> str:
    """The split of the ``number``-th document (counting from 1): see the module doc."""
    rest = number % HELD_OUT_EVERY
    return "test" if rest == 0 else "valid" if rest == HELD_OUT_EVERY - 1 else "train"


def split_text(documents: list, max_chars) -> dict:
    """{split: [Document]} by the held-out rule; ``max_chars`` shared 90/5/5 as for the docstrings."""
    if len(documents) < HELD_OUT_EVERY:
        raise ValueError(f"the text has {len(documents)} documents (blank-line separated blocks); the held-out "
                         f"rule (every {HELD_OUT_EVERY}th to test, the one before to valid) needs at least "
                         f"{HELD_OUT_EVERY}")  # fmt: skip
    by_split = {split: [] for split in SPLITS}
    for number, document in enumerate(documents, start=1):
        by_split[split_of_position(number)].append(document)
    budget = {s: None if max_chars is None else max_chars * SPLIT_PERCENT[s] // 100 for s in SPLITS}
    return {split: cap_chars(by_split[split], budget[split]) for split in SPLITS}


def chars(documents) -> int:
    return sum(len(p) for d in documents for p in d.paragraphs)


def without_duplicates(documents: list) -> list:
    """``documents`` less each exact copy of an earlier one (same text), in order."""
    seen = set()
    return [d for d in documents if not (tuple(d.paragraphs) in seen or seen.add(tuple(d.paragraphs)))]


def held_out_in_train(split: dict) -> dict:
    """{valid|test: documents and characters whose text is also a train document's, of the split's}."""
    train = {tuple(d.paragraphs) for d in split["train"]}
    overlap = {s: [d for d in split[s] if tuple(d.paragraphs) in train] for s in SPLITS if s != "train"}
    return {s: {"documents": len(copies), "of_documents": len(split[s]), "chars": chars(copies),
                "of_chars": chars(split[s])} for s, copies in overlap.items()}  # fmt: skip


def build_text_corpus(out_dir, files: Sequence, *, fmt="lm", vocab_size=8000, max_chars=None, seed=0,
                      workers=1, dedup=False) -> CorpusPaths:  # fmt: skip
    """Build (or reuse, with the same files, contents and settings) a corpus of ``files`` in ``out_dir``."""
    check_args(fmt, vocab_size, max_chars, workers)
    texts = {path: read_text(Path(path)) for path in files}
    digest = hashlib.sha256("\0".join(texts.values()).encode()).hexdigest()
    settings = {"format": fmt, "vocab_size": vocab_size, "max_chars": max_chars, "seed": seed,
                "text": [str(p) for p in texts], "text_sha256": digest, **({"dedup": True} if dedup else {})}  # fmt: skip
    documents = [doc for path, text in texts.items() for doc in file_documents(path, text)]
    kept = without_duplicates(documents) if dedup else documents
    split = split_text(kept, max_chars)  # fails before anything is written
    removed = {"documents": len(documents) - len(kept), "chars": chars(documents) - chars(kept)}
    extra = {"held_out_in_train": held_out_in_train(split), **({"duplicates_removed": removed} if dedup else {})}
    return build_or_reuse(out_dir, settings,
                          lambda tmp: {**build_from_documents(tmp, split, settings, workers, "files"), **extra})

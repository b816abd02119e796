"""A real-text corpus that needs no download: the docstrings of the Python standard library.

``build_corpus(out_dir)`` extracts the docstrings (modules, classes, functions) with ``ast``, splits
them train/valid/test by module, trains a SentencePiece model on the train split, encodes every
split into pieces and binarizes them with ``fairseq-preprocess``. Layout of ``out_dir``::

    raw/{train,valid,test}.txt      text; 'lm': one paragraph a line; 'bert': one sentence a line,
                                    an empty line between documents
    spm.model, spm.vocab            SentencePiece model (trained on raw/train.txt only)
    pieces/{train,valid,test}.txt   the splits as SentencePiece pieces
    data-bin/                       fairseq-preprocess output (dict.txt, {split}.bin/.idx)
    corpus.json                     settings and statistics; written last, marks the build complete

The build happens in a sibling temporary directory renamed to ``out_dir`` at the end, so ``out_dir``
is either absent or complete. The text depends on the Python version's standard library, which
``corpus.json`` records.
"""
import ast
import hashlib
import os
import platform
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .pipeline import (
    SPLITS,
    CorpusPaths,
    build_or_reuse,
    corpus_paths,
    encode_splits,
    fairseq_preprocess,
    train_sentencepiece,
    vocabulary_sizes,
)

SPLIT_PERCENT = {"train": 90, "valid": 5, "test": 5}
FORMATS = ("lm", "bert")
# Directories of the standard library that hold test suites, bundled third-party code, generated
# codec tables or demos rather than documented API.
SKIPPED_DIRS = {
    "site-packages", "dist-packages", "__pycache__", "lib-dynload", "test", "tests", "idle_test",
    "idlelib", "lib2to3", "turtledemo", "ensurepip", "encodings", "pydoc_data", "__phello__",
}  # fmt: skip
DOCTEST_PROMPT = re.compile(r"^>>>( |$)")
RST_RULE = re.compile(r"^[-=~^*#+_`'\"]{3,}$")  # reST section underlines, table borders
# A sentence ends at . ! or ? followed by space and something that can start a sentence.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'`(\[])")
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "cf.", "vs.", "Mr.", "Dr.", "No.")


@dataclass
class Document:
    module: str
    paragraphs: list  # whitespace-normalised paragraphs, in source order


# --- Text ----------------------------------------------------------------------------------------
def stdlib_modules(stdlib_dir) -> list:
    """(dotted module name, path) of every .py file of the standard library, sorted by name."""
    root, modules = Path(stdlib_dir), []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("config-")]
        for filename in filenames:
            if filename.endswith(".py"):
                rel = (Path(dirpath) / filename).relative_to(root).with_suffix("")
                name = ".".join(rel.parts).removesuffix(".__init__")
                modules.append((name, Path(dirpath) / filename))
    return sorted(modules)


def docstring_paragraphs(text: str) -> list:
    """Paragraphs (blank-line separated) of a docstring with whitespace collapsed; doctest
    examples (a '>>>' line and what follows it up to the next blank line) and reST rules dropped."""
    paragraphs, lines, in_doctest = [], [], False
    for line in text.splitlines() + [""]:
        line = line.strip()
        if not line:
            paragraphs.append(" ".join(" ".join(lines).split()))
            lines, in_doctest = [], False
        elif DOCTEST_PROMPT.match(line):
            in_doctest = True
        elif not in_doctest and not RST_RULE.match(line):
            lines.append(line)
    return [p for p in paragraphs if any(c.isalpha() for c in p)]


def _definitions(body):
    """Classes and functions of a module or class body, also those under if/try/with blocks."""
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "handlers", "finalbody"):
                for child in getattr(node, block, []):
                    yield from _definitions(child.body if isinstance(child, ast.ExceptHandler) else [child])


def node_documents(node, module: str) -> list:
    """A module's or class's docstring plus those of the functions defined directly in it form one
    document; each class inside starts a document of its own (its methods belong to it)."""
    texts, nested = [ast.get_docstring(node)], []
    for child in _definitions(node.body):
        if isinstance(child, ast.ClassDef):
            nested += node_documents(child, module)
        else:
            texts.append(ast.get_docstring(child))
    paragraphs = [p for text in texts if text for p in docstring_paragraphs(text)]
    return ([Document(module, paragraphs)] if paragraphs else []) + nested


def module_documents(name: str, path: Path) -> list:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):  # e.g. a file written for another Python version
        return []
    return node_documents(tree, name)


def split_of(module: str, seed: int) -> str:
    """train/valid/test by a stable hash of the module name (90/5/5): a module is in one split."""
    digest = hashlib.sha256(f"{seed}:{module}".encode()).digest()
    bucket = int.from_bytes(digest[:8], "big") % 100
    train, valid = SPLIT_PERCENT["train"], SPLIT_PERCENT["valid"]
    return "train" if bucket < train else "valid" if bucket < train + valid else "test"


def cap_chars(documents, max_chars) -> list:
    """The leading paragraphs of ``documents`` (an iterable, consumed only as far as needed)
    whose lengths sum to at most max_chars (None: no cap)."""
    kept, total = [], 0
    for doc in documents:
        paragraphs = []
        for paragraph in doc.paragraphs:
            total += len(paragraph)
            if max_chars is not None and total > max_chars:
                return kept + ([Document(doc.module, paragraphs)] if paragraphs else [])
            paragraphs.append(paragraph)
        kept.append(doc)
    return kept


def sentences(paragraph: str) -> list:
    """Split at '. ', '! ' or '? ' followed by a capital, digit, quote or bracket, except after
    a few common abbreviations. Simple and deterministic, not linguistically exact."""
    out = []
    for piece in SENTENCE_END.split(paragraph):
        if out and out[-1].endswith(ABBREVIATIONS):
            out[-1] += " " + piece
        else:
            out.append(piece)
    return out


def format_lines(documents: list, fmt: str) -> list:
    """'lm': one paragraph a line. 'bert': one sentence a line, an empty line between documents."""
    if fmt == "lm":
        return [p for doc in documents for p in doc.paragraphs]
    lines = []
    for i, doc in enumerate(documents):
        lines += ([""] if i else []) + [s for p in doc.paragraphs for s in sentences(p)]
    return lines


def split_documents(stdlib_dir, seed: int, max_chars, sources=stdlib_modules, documents_of=module_documents) -> dict:
    """{split: [Document]} in sorted name order; max_chars is shared 90/5/5 among the splits
    (a source file is parsed only when its split still has room). ``sources(dir)`` lists (name, path)
    and ``documents_of(name, path)`` reads a file's documents: by default the standard library's modules
    and their docstrings (python_docs.py: the Python manual's files and their prose)."""
    files = sources(stdlib_dir)

    def documents(split):
        for name, path in files:
            if split_of(name, seed) == split:
                yield from documents_of(name, path)

    budget = {s: None if max_chars is None else max_chars * SPLIT_PERCENT[s] // 100 for s in SPLITS}
    return {split: cap_chars(documents(split), budget[split]) for split in SPLITS}


# --- Build -------------------------------------------------------------------------------------
def _write_text(documents: dict, raw_dir: Path, fmt: str, source_name: str) -> dict:
    raw_dir.mkdir(parents=True)
    stats = {}
    for split, docs in documents.items():
        lines = format_lines(docs, fmt)
        if not any(lines):
            raise ValueError(f"the {split} split is empty: raise max_chars")
        (raw_dir / f"{split}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        stats[split] = {
            source_name: len({d.module for d in docs}),
            "documents": len(docs),
            "lines": sum(1 for line in lines if line),
            "chars": sum(len(line) for line in lines),
        }
    return stats


def _build(tmp: Path, settings: dict, workers: int) -> dict:
    if "python_docs" in settings:
        from . import python_docs  # it builds on this module's Document and reST rules

        documents = split_documents(settings["python_docs"], settings["seed"], settings["max_chars"],
                                    python_docs.doc_files, python_docs.file_document)  # fmt: skip
    else:
        documents = split_documents(settings["stdlib"], settings["seed"], settings["max_chars"])
    return build_from_documents(tmp, documents, settings, workers)


def build_from_documents(tmp: Path, documents: dict, settings: dict, workers: int, source_name="modules") -> dict:
    """The corpus layout above from {split: [Document]}: text in ``settings["format"]``, SentencePiece
    trained on train, pieces, fairseq-preprocess; the statistics (``source_name``: what Document.module names)."""
    paths = corpus_paths(tmp)
    stats = _write_text(documents, paths.raw_dir, settings["format"], source_name)
    train_sentencepiece([paths.raw_dir / "train.txt"], tmp / "spm", settings["vocab_size"], settings["seed"])
    pieces = encode_splits(tmp, [f"{split}.txt" for split in SPLITS])
    for split in SPLITS:
        stats[split]["pieces"] = pieces[f"{split}.txt"]
    fairseq_preprocess(tmp / "pieces", paths.data_bin, workers, ["--only-source"], ".txt")
    return {**stats, **vocabulary_sizes(paths, "dict.txt")}


def check_args(fmt, vocab_size, max_chars, workers):
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8, got {vocab_size}")
    if max_chars is not None and max_chars < 1000:
        raise ValueError(f"max_chars must be at least 1000 (or None for the whole corpus), got {max_chars}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")


def build_corpus(out_dir, *, fmt="lm", vocab_size=8000, max_chars=None, seed=0, workers=1,
                 python_docs_dir=None) -> CorpusPaths:
    """Build (or reuse, when ``out_dir`` holds a complete corpus with the same settings) the
    standard-library docstring corpus, or with ``python_docs_dir`` the Python manual's prose
    (python_docs.py). Never writes into an existing non-empty ``out_dir``."""
    check_args(fmt, vocab_size, max_chars, workers)
    settings = {"format": fmt, "vocab_size": vocab_size, "max_chars": max_chars, "seed": seed,
                "python": platform.python_version(), "stdlib": sysconfig.get_paths()["stdlib"]}  # fmt: skip
    if python_docs_dir is not None:
        from .python_docs import doc_files

        doc_files(python_docs_dir)  # names the package to install when the manual is missing
        settings = {**settings, "stdlib": None, "python_docs": str(Path(python_docs_dir).absolute())}
    return build_or_reuse(out_dir, settings, lambda tmp: _build(tmp, settings, workers))

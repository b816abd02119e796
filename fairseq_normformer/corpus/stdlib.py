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
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import sentencepiece as spm

from ..runs.atomic import atomic_directory

SPLITS = ("train", "valid", "test")
SPLIT_PERCENT = {"train": 90, "valid": 5, "test": 5}
FORMATS = ("lm", "bert")
MARKER = "corpus.json"
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
class CorpusPaths:
    raw_dir: Path  # train.txt valid.txt test.txt (raw text)
    spm_model: Path  # SentencePiece model
    data_bin: Path  # fairseq-preprocess output: dict.txt, {train,valid,test}.{bin,idx}


@dataclass
class Document:
    module: str
    paragraphs: list  # whitespace-normalised paragraphs, in source order


def corpus_paths(out_dir) -> CorpusPaths:
    out_dir = Path(out_dir)
    return CorpusPaths(out_dir / "raw", out_dir / "spm.model", out_dir / "data-bin")


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


def split_documents(stdlib_dir, seed: int, max_chars) -> dict:
    """{split: [Document]} in sorted module order; max_chars is shared 90/5/5 among the splits
    (a module is parsed only when its split still has room)."""
    modules = stdlib_modules(stdlib_dir)

    def documents(split):
        for name, path in modules:
            if split_of(name, seed) == split:
                yield from module_documents(name, path)

    budget = {s: None if max_chars is None else max_chars * SPLIT_PERCENT[s] // 100 for s in SPLITS}
    return {split: cap_chars(documents(split), budget[split]) for split in SPLITS}


# --- SentencePiece and fairseq-preprocess ----------------------------------------------------------
def train_sentencepiece(train_txt: Path, model_prefix: Path, vocab_size: int, seed: int):
    """Unigram model on the train split, with deterministic settings (all lines, no sampling or
    shuffling, one thread); the vocabulary limit is soft so that tiny corpora work."""
    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        input=str(train_txt), model_prefix=str(model_prefix), vocab_size=vocab_size,
        model_type="unigram", hard_vocab_limit=False, input_sentence_size=0,
        shuffle_input_sentence=False, max_sentence_length=1 << 16, num_threads=1,
        unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1, minloglevel=2,
    )  # fmt: skip


def encode_pieces(model: Path, raw: Path, out: Path) -> int:
    """Write ``raw`` as space-separated pieces, line for line (empty lines stay empty)."""
    sp, n_pieces = spm.SentencePieceProcessor(model_file=str(model)), 0
    with raw.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        for line in src:
            pieces = sp.encode(line.rstrip("\n"), out_type=str)
            n_pieces += len(pieces)
            dst.write(" ".join(pieces) + "\n")
    return n_pieces


def fairseq_preprocess(pieces_dir: Path, dest: Path, workers: int):
    """fairseq-preprocess --only-source: the dictionary comes from the train split alone."""
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--only-source", "--destdir", str(dest),
           "--workers", str(workers), "--dataset-impl", "mmap"]  # fmt: skip
    for split, flag in zip(SPLITS, ("--trainpref", "--validpref", "--testpref")):
        cmd += [flag, str(pieces_dir / f"{split}.txt")]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"fairseq-preprocess failed ({' '.join(cmd)}):\n{result.stdout}\n{result.stderr}")


def run_preprocess(destdir: Path, trainpref: Path, validpref: Path, srcdict: Optional[Path] = None):
    """fairseq-preprocess --only-source of a task's train and valid pieces, in this process (one
    fairseq import for all calls); ``srcdict``: the pre-training dictionary (else built from train)."""
    from fairseq import options
    from fairseq_cli import preprocess

    argv = ["--only-source", "--trainpref", str(trainpref), "--validpref", str(validpref),
            "--destdir", str(destdir), "--workers", "1"] + (["--srcdict", str(srcdict)] if srcdict else [])  # fmt: skip
    preprocess.main(options.get_preprocessing_parser().parse_args(argv))


# --- Build -------------------------------------------------------------------------------------
def _write_text(documents: dict, raw_dir: Path, fmt: str) -> dict:
    raw_dir.mkdir(parents=True)
    stats = {}
    for split, docs in documents.items():
        lines = format_lines(docs, fmt)
        if not any(lines):
            raise ValueError(f"the {split} split is empty: raise max_chars")
        (raw_dir / f"{split}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        stats[split] = {
            "modules": len({d.module for d in docs}),
            "documents": len(docs),
            "lines": sum(1 for line in lines if line),
            "chars": sum(len(line) for line in lines),
        }
    return stats


def _build(tmp: Path, settings: dict, workers: int) -> dict:
    paths = corpus_paths(tmp)
    documents = split_documents(settings["stdlib"], settings["seed"], settings["max_chars"])
    stats = _write_text(documents, paths.raw_dir, settings["format"])
    train_sentencepiece(paths.raw_dir / "train.txt", tmp / "spm", settings["vocab_size"], settings["seed"])
    (tmp / "pieces").mkdir()
    for split in SPLITS:
        pieces = tmp / "pieces" / f"{split}.txt"
        stats[split]["pieces"] = encode_pieces(paths.spm_model, paths.raw_dir / f"{split}.txt", pieces)
    fairseq_preprocess(tmp / "pieces", paths.data_bin, workers)
    stats["spm_vocab_size"] = spm.SentencePieceProcessor(model_file=str(paths.spm_model)).get_piece_size()
    stats["dict_size"] = sum(1 for _ in (paths.data_bin / "dict.txt").open(encoding="utf-8"))
    return stats


def read_manifest(out_dir) -> dict:
    """The settings and statistics ``build_corpus`` recorded in ``out_dir/corpus.json``."""
    return json.loads((Path(out_dir) / MARKER).read_text())


def _reuse(out_dir: Path, settings: dict) -> CorpusPaths:
    recorded = read_manifest(out_dir)["settings"]
    if recorded != settings:
        diff = ", ".join(
            f"{k}: {recorded.get(k)!r} there, {v!r} asked" for k, v in settings.items() if recorded.get(k) != v
        )
        raise FileExistsError(
            f"{out_dir} holds a corpus built with other settings ({diff}); "
            "remove it or choose another directory"
        )
    return corpus_paths(out_dir)


def _check_args(fmt, vocab_size, max_chars, workers):
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8, got {vocab_size}")
    if max_chars is not None and max_chars < 1000:
        raise ValueError(f"max_chars must be at least 1000 (or None for the whole corpus), got {max_chars}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")


def build_corpus(out_dir, *, fmt="lm", vocab_size=8000, max_chars=None, seed=0, workers=1) -> CorpusPaths:
    """Build (or reuse, when ``out_dir`` holds a complete corpus with the same settings) the
    standard-library docstring corpus. Never writes into an existing non-empty ``out_dir``."""
    _check_args(fmt, vocab_size, max_chars, workers)
    out_dir = Path(out_dir).absolute()
    settings = {"format": fmt, "vocab_size": vocab_size, "max_chars": max_chars, "seed": seed,
                "python": platform.python_version(), "stdlib": sysconfig.get_paths()["stdlib"]}  # fmt: skip
    if (out_dir / MARKER).exists():
        return _reuse(out_dir, settings)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir} is not empty and holds no complete corpus ({MARKER} missing, an interrupted build "
            "or other files); remove it or choose another directory"
        )
    try:
        with atomic_directory(out_dir) as tmp:
            stats = _build(tmp, settings, workers)
            (tmp / MARKER).write_text(json.dumps({"settings": settings, "stats": stats}, indent=2) + "\n")
    except OSError:
        if not (out_dir / MARKER).exists():  # not a concurrent build of the same directory
            raise
        return _reuse(out_dir, settings)
    return corpus_paths(out_dir)

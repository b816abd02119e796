"""What every corpus build shares: SentencePiece training and encoding, ``fairseq-preprocess``, the
``corpus.json`` manifest, and building into a temporary directory that is renamed into place (so an
output directory is either absent or complete) or reusing a complete one built with the same settings.
The corpora themselves: stdlib.py (docstrings, language modelling), gettext.py (translation)."""
import importlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import sentencepiece as spm

from ..runs.atomic import atomic_directory

SPLITS = ("train", "valid", "test")
MARKER = "corpus.json"


@dataclass
class CorpusPaths:
    raw_dir: Path  # the text of each split
    spm_model: Path  # SentencePiece model
    data_bin: Path  # fairseq-preprocess output: dictionaries, {split}.bin/.idx


def corpus_paths(out_dir) -> CorpusPaths:
    out_dir = Path(out_dir)
    return CorpusPaths(out_dir / "raw", out_dir / "spm.model", out_dir / "data-bin")


# --- SentencePiece and fairseq-preprocess ----------------------------------------------------------
def train_sentencepiece(inputs: Sequence[Path], model_prefix: Path, vocab_size: int, seed: int):
    """Unigram model on the ``inputs`` text files (one vocabulary for all of them), with deterministic
    settings (all lines, no sampling or shuffling, one thread); the vocabulary limit is soft so that
    tiny corpora work."""
    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        input=",".join(map(str, inputs)), model_prefix=str(model_prefix), vocab_size=vocab_size,
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


def fairseq_preprocess(pieces_dir: Path, dest: Path, workers: int, language_args: Sequence[str], suffix=""):
    """fairseq-preprocess of ``pieces_dir``/{train,valid,test}``suffix``; the dictionaries come from the
    train split alone. ``language_args``: ``--only-source`` (with suffix ``.txt``: ``train.txt``, ...)
    or ``--source-lang en --target-lang de ...`` (fairseq adds the suffixes: ``train.en``, ...).
    Run in this process (a new Python spent ~5 s of CPU importing torch and fairseq for it); its log goes to
    ``dest``/preprocess.log alone, at INFO, as fairseq-preprocess writes it, and this process's logging stays as it
    was (fairseq_cli.preprocess configures the root logger when imported, and adds a file handler per call)."""
    argv = [*language_args, "--destdir", str(dest), "--workers", str(workers), "--dataset-impl", "mmap"]
    for split, flag in zip(SPLITS, ("--trainpref", "--validpref", "--testpref")):
        argv += [flag, str(pieces_dir / f"{split}{suffix}")]
    preprocess = import_keeping_the_root_logger("fairseq_cli.preprocess")
    from fairseq import options  # imported with it

    args = options.get_preprocessing_parser().parse_args(argv)
    log = logging.getLogger("fairseq_cli.preprocess")
    saved = log.handlers[:], log.level, log.propagate
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        preprocess.main(args)
    finally:
        for handler in log.handlers[len(saved[0]) :]:
            handler.close()
        log.handlers[:], log.level, log.propagate = saved


def import_keeping_the_root_logger(name: str):
    """``import name``, the root logger's handlers and level set back after it (a CLI's logging.basicConfig)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    module = importlib.import_module(name)
    root.handlers[:], root.level = handlers, level
    return module


# --- Manifest, reuse, atomic build -----------------------------------------------------------------
def read_manifest(out_dir) -> dict:
    """The settings and statistics a build recorded in ``out_dir/corpus.json``."""
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


def build_or_reuse(out_dir, settings: dict, build: Callable[[Path], dict]) -> CorpusPaths:
    """Reuse ``out_dir`` when it holds a complete corpus with the same ``settings``; otherwise run
    ``build(tmp) -> stats`` in a temporary sibling and rename it into place with its manifest written
    last. Never writes into an existing non-empty ``out_dir``."""
    out_dir = Path(out_dir).absolute()
    if (out_dir / MARKER).exists():
        return _reuse(out_dir, settings)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir} is not empty and holds no complete corpus ({MARKER} missing, an interrupted build "
            "or other files); remove it or choose another directory"
        )
    try:
        with atomic_directory(out_dir) as tmp:
            stats = build(tmp)
            (tmp / MARKER).write_text(json.dumps({"settings": settings, "stats": stats}, indent=2) + "\n")
    except OSError:
        if not (out_dir / MARKER).exists():  # not a concurrent build of the same directory
            raise
        return _reuse(out_dir, settings)
    return corpus_paths(out_dir)


def encode_splits(tmp: Path, files: Sequence[str]) -> dict:
    """Encode raw/<file> to pieces/<file> for each file name with ``tmp``'s SentencePiece model;
    {file: number of pieces}."""
    (tmp / "pieces").mkdir()
    paths = corpus_paths(tmp)
    return {name: encode_pieces(paths.spm_model, paths.raw_dir / name, tmp / "pieces" / name) for name in files}


def vocabulary_sizes(paths: CorpusPaths, dictionary: str) -> dict:
    """The SentencePiece model's and the fairseq dictionary's sizes (``dictionary``: a file of data-bin)."""
    return {
        "spm_vocab_size": spm.SentencePieceProcessor(model_file=str(paths.spm_model)).get_piece_size(),
        "dict_size": sum(1 for _ in (paths.data_bin / dictionary).open(encoding="utf-8")),
    }


def run_preprocess(destdir: Path, trainpref: Path, validpref: Path, srcdict: Optional[Path] = None):
    """fairseq-preprocess --only-source of a task's train and valid pieces, in this process (one
    fairseq import for all calls); ``srcdict``: the pre-training dictionary (else built from train)."""
    from fairseq import options
    from fairseq_cli import preprocess

    argv = ["--only-source", "--trainpref", str(trainpref), "--validpref", str(validpref),
            "--destdir", str(destdir), "--workers", "1"] + (["--srcdict", str(srcdict)] if srcdict else [])  # fmt: skip
    preprocess.main(options.get_preprocessing_parser().parse_args(argv))


def binarize_inputs(columns: dict, spm_model: Path, srcdict: Optional[Path], tmp: Path) -> Path:
    """fairseq's sentence_prediction / sentence_ranking layout: ``columns[split][i]`` are the texts of input
    i, written as SentencePiece pieces to tmp/text and binarized into tmp/input{i}; returns tmp/text."""
    text = tmp / "text"
    text.mkdir(parents=True, exist_ok=True)
    for i in range(len(next(iter(columns.values())))):
        for split, inputs in columns.items():
            raw = text / f"input{i}.{split}.raw"
            raw.write_text("".join(t + "\n" for t in inputs[i]), encoding="utf-8")
            encode_pieces(spm_model, raw, text / f"input{i}.{split}")
        run_preprocess(tmp / f"input{i}", text / f"input{i}.train", text / f"input{i}.valid", srcdict)
    return text

"""A tiny parallel corpus built at run time from the standard-library corpus: each source line is a run of
SentencePiece pieces of a docstring, its "translation" the same pieces in reverse order (learnable by a
tiny model, and scored by sacrebleu like any language pair)."""
from pathlib import Path

from tests.conftest import run_cli

SRC, TGT = "fwd", "rev"
SPLIT_PAIRS = {"train": 1500, "valid": 40, "test": 43}  # 43: not a multiple of 8 (fixes/batches.py)
CHUNK = 8  # pieces a sentence


def chunks(pieces_file: Path, limit: int) -> list:
    pairs = []
    for line in pieces_file.read_text(encoding="utf-8").splitlines():
        pieces = line.split()
        pairs += [pieces[i : i + CHUNK] for i in range(0, len(pieces) - CHUNK + 1, CHUNK)]
    return pairs[:limit]


def build_reversal_corpus(corpus, out: Path) -> Path:
    """``out/data-bin``: fairseq-preprocess output of the pairs, with the corpus's dictionary for both sides."""
    raw = out / "raw"
    raw.mkdir(parents=True)
    for split, limit in SPLIT_PAIRS.items():
        sentences = chunks(corpus.raw_dir.parent / "pieces" / f"{split}.txt", limit)
        (raw / f"{split}.{SRC}").write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
        (raw / f"{split}.{TGT}").write_text("".join(" ".join(s[::-1]) + "\n" for s in sentences), encoding="utf-8")
    run_cli(["fairseq-preprocess", "--source-lang", SRC, "--target-lang", TGT, "--joined-dictionary",
             "--srcdict", corpus.data_bin / "dict.txt", "--trainpref", raw / "train", "--validpref", raw / "valid",
             "--testpref", raw / "test", "--destdir", out / "data-bin", "--workers", "1"])  # fmt: skip
    return out / "data-bin"

"""SWAG (Zellers et al. 2018; BERT §4.4) multiple choice through fairseq's ``sentence_ranking``.

SWAG's CSVs (train.csv, val.csv) have the columns ``video-id, fold-ind, startphrase, sent1, sent2,
gold-source, ending0..ending3, label`` (the released files add an unnamed index column first);
only sent1, sent2, the endings and label are read, by name. As fairseq's
examples/roberta/commonsense_qa, each example becomes ``input0`` (the context: sent1) and one
input per choice (``input1..4``: sent2 followed by ending k), tokenized with the pre-training
SentencePiece model and binarized with its dictionary, and ``label/{split}.label`` (the index of
the right ending). ``--task sentence_ranking --init-token 0`` then scores ``<s> choice </s> context
</s>`` with RoBERTa's classification head (one logit) and trains a softmax over the choices."""
import csv
from dataclasses import dataclass
from pathlib import Path

from ..corpus.pipeline import binarize_inputs
from ..runs.atomic import atomic_directory

ENDINGS = 4
TEXT_COLUMNS = ("sent1", "sent2") + tuple(f"ending{k}" for k in range(ENDINGS))
SPLIT_FILES = {"train": "train.csv", "valid": "val.csv"}  # SWAG's file names


@dataclass
class SwagExample:
    context: str  # sent1
    start: str  # sent2: the beginning of the next sentence, which each ending completes
    endings: list
    label: int


def read_swag(path) -> list:
    """The labelled examples of a SWAG CSV; a missing column, a row with too few fields or a label
    that is not 0-3 is an error naming the file and line."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in TEXT_COLUMNS + ("label",) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}:1: not a SWAG CSV header: missing column(s) {', '.join(missing)}")
        return [_example(row, f"{path}:{reader.line_num}", len(reader.fieldnames)) for row in reader]


def _example(row: dict, where: str, n_columns: int) -> SwagExample:
    if None in row or any(v is None for v in row.values()):
        raise ValueError(f"{where}: malformed row: expected {n_columns} fields")
    label = row["label"].strip()
    if label not in {str(k) for k in range(ENDINGS)}:
        raise ValueError(f"{where}: label {label!r} is not one of 0-{ENDINGS - 1}")
    text = {c: " ".join(row[c].split()) for c in TEXT_COLUMNS}
    return SwagExample(text["sent1"], text["sent2"], [text[f"ending{k}"] for k in range(ENDINGS)], int(label))


def choice_texts(example: SwagExample) -> list:
    """input0 (the context), then each choice: sent2 followed by the ending."""
    return [example.context] + [f"{example.start} {ending}".strip() for ending in example.endings]


def write_ranking_data(swag_dir, spm_model, srcdict, out_dir) -> dict:
    """SWAG_DIR/{train,val}.csv -> OUT_DIR/input{0..4}/ (binarized, dict.txt) and label/; returns
    the number of examples per split. OUT_DIR appears complete or not at all."""
    splits = {split: read_swag(Path(swag_dir) / name) for split, name in SPLIT_FILES.items()}
    if Path(out_dir).exists():
        raise FileExistsError(f"{out_dir} exists; remove it or choose another directory")
    with atomic_directory(Path(out_dir)) as tmp:
        (tmp / "label").mkdir(parents=True)
        for split, examples in splits.items():
            (tmp / "label" / f"{split}.label").write_text("".join(f"{e.label}\n" for e in examples))
        columns = {split: [[choice_texts(e)[i] for e in examples] for i in range(ENDINGS + 1)]
                   for split, examples in splits.items()}  # fmt: skip
        binarize_inputs(columns, spm_model, srcdict, tmp)
    return {split: len(examples) for split, examples in splits.items()}

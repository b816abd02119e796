#!/usr/bin/env python
"""Data for fairseq's ``sentence_prediction`` task, laid out as fairseq's RoBERTa GLUE example
(``input0/``, ``input1/``, ``label/``), tokenized with the pre-training corpus's SentencePiece model
and binarized with its dictionary.

    sentence_prediction_data.py glue TASK TASK_DIR --spm-model M --dict D --out OUT
        GLUE TSVs (TASK_DIR/train.tsv, dev.tsv; MNLI: dev_matched.tsv) -> OUT (train, valid)
    sentence_prediction_data.py same-document RAW_DIR --out TASK_DIR [--pairs N] [--seed S]
        A sentence-pair task built offline from BERT-format text (RAW_DIR/{train,valid}.txt):
        "do these two sentences come from the same document (module or class docstring)?",
        half of the pairs yes, written as GLUE-style TSVs (task name SameDoc, RTE's columns).
"""
import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from fairseq_normformer.corpus.pipeline import binarize_inputs, run_preprocess
from fairseq_normformer.runs.atomic import atomic_directory


@dataclass(frozen=True)
class TaskFormat:
    """Columns (0-based) as fairseq's examples/roberta/preprocess_GLUE_tasks.sh reads them."""

    inputs: Tuple[int, ...]
    label: int
    dev_label: Optional[int] = None  # when dev has another layout (MNLI)
    header: bool = True
    dev_file: str = "dev.tsv"
    label_scale: Optional[float] = None  # regression: labels divided by this (STS-B: 5)


GLUE_TASKS = {
    "CoLA": TaskFormat(inputs=(3,), label=1, header=False),
    "SST-2": TaskFormat(inputs=(0,), label=1),
    "MRPC": TaskFormat(inputs=(3, 4), label=0),
    "QQP": TaskFormat(inputs=(3, 4), label=5),
    "STS-B": TaskFormat(inputs=(7, 8), label=9, label_scale=5.0),
    "MNLI": TaskFormat(inputs=(8, 9), label=11, dev_label=15, dev_file="dev_matched.tsv"),
    "QNLI": TaskFormat(inputs=(1, 2), label=3),
    "RTE": TaskFormat(inputs=(1, 2), label=3),
    "SameDoc": TaskFormat(inputs=(1, 2), label=3),  # built by the same-document command
}


def read_tsv(path: Path, fmt: TaskFormat, label_column: int):
    """(columns of inputs..., label) per row; rows with missing columns are skipped and counted."""
    rows, skipped = [], 0
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if fmt.header:
            next(reader, None)
        for row in reader:
            if len(row) <= max(*fmt.inputs, label_column):
                skipped += 1
                continue
            rows.append([" ".join(row[c].split()) for c in fmt.inputs] + [row[label_column].strip()])
    if skipped:
        print(f"{path}: skipped {skipped} malformed rows", file=sys.stderr)
    if not rows:
        raise ValueError(f"{path}: no rows with {max(*fmt.inputs, label_column) + 1} columns")
    return rows


def binarize(splits: dict, fmt: TaskFormat, spm_model: Path, srcdict: Path, tmp: Path):
    """splits: {split: rows}. Inputs become SentencePiece pieces binarized with the pre-training
    dictionary; class labels get their own dictionary, regression targets a ``.label`` text file."""
    columns = {split: [[r[i] for r in rows] for i in range(len(fmt.inputs))] for split, rows in splits.items()}
    text = binarize_inputs(columns, spm_model, srcdict, tmp)
    if fmt.label_scale:
        (tmp / "label").mkdir()
        for split, rows in splits.items():
            (tmp / "label" / f"{split}.label").write_text("".join(f"{float(r[-1]) / fmt.label_scale}\n" for r in rows))
    else:
        for split, rows in splits.items():
            (text / f"label.{split}").write_text("".join(r[-1] + "\n" for r in rows), encoding="utf-8")
        run_preprocess(tmp / "label", text / "label.train", text / "label.valid", None)


def write_atomically(out: Path, build):
    """Run ``build(tmp)`` in a sibling directory renamed to ``out`` at the end: ``out`` is complete or absent."""
    if out.exists():
        raise FileExistsError(f"{out} exists; remove it or choose another directory")
    with atomic_directory(out) as tmp:
        build(tmp)


def glue(args):
    fmt = GLUE_TASKS[args.task]
    splits = {
        "train": read_tsv(args.task_dir / "train.tsv", fmt, fmt.label),
        "valid": read_tsv(args.task_dir / fmt.dev_file, fmt, fmt.dev_label or fmt.label),
    }
    write_atomically(args.out, lambda tmp: binarize(splits, fmt, args.spm_model, args.dict, tmp))
    print(f"{args.task}: {len(splits['train'])} train and {len(splits['valid'])} valid rows -> {args.out}")


# --- SameDoc: a sentence-pair task from BERT-format text -------------------------------------------
def read_documents(path: Path):
    """BERT format: one sentence per line, an empty line between documents."""
    documents, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if line.strip():
            current.append(" ".join(line.split()))
        elif current:
            documents.append(current)
            current = []
    return documents


def same_document_pairs(documents, n_pairs: int, rng):
    """Even k: two different sentences of one document ("same"); odd k: sentences of two documents."""
    multi = [d for d in documents if len(d) >= 2]
    if len(multi) < 1 or len(documents) < 2:
        raise ValueError("need at least one document of 2+ sentences and 2 documents")
    pairs = []
    for k in range(n_pairs):
        if k % 2 == 0:
            doc = multi[rng.integers(len(multi))]
            i, j = rng.choice(len(doc), size=2, replace=False)
            pairs.append((doc[i], doc[j], "same"))
        else:
            a, b = rng.choice(len(documents), size=2, replace=False)
            pairs.append((documents[a][rng.integers(len(documents[a]))], documents[b][rng.integers(len(documents[b]))],
                          "different"))  # fmt: skip
    return pairs


def same_document(args):
    rng = np.random.default_rng(args.seed)

    def build(tmp):
        for split, filename, n in (("train", "train.tsv", args.pairs), ("valid", "dev.tsv", max(args.pairs // 10, 50))):
            pairs = same_document_pairs(read_documents(args.raw_dir / f"{split}.txt"), n, rng)
            rows = [f"{i}\t{a}\t{b}\t{label}" for i, (a, b, label) in enumerate(pairs)]
            lines = ["index\tsentence1\tsentence2\tlabel"] + rows
            (tmp / filename).write_text("\n".join(lines) + "\n", encoding="utf-8")

    write_atomically(args.out, build)
    print(f"SameDoc: {args.pairs} train pairs -> {args.out}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    g = commands.add_parser("glue", help="binarize one GLUE task's TSVs")
    g.add_argument("task", choices=sorted(GLUE_TASKS))
    g.add_argument("task_dir", type=Path)
    g.add_argument("--spm-model", type=Path, required=True, help="the pre-training corpus's SentencePiece model")
    g.add_argument("--dict", type=Path, required=True, help="the pre-training data's dict.txt")
    g.add_argument("--out", type=Path, required=True)
    s = commands.add_parser("same-document", help="build the SameDoc task's TSVs from BERT-format text")
    s.add_argument("raw_dir", type=Path, help="directory with train.txt and valid.txt in BERT format")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--pairs", type=int, default=2000, help="training pairs (valid: a tenth, at least 50)")
    s.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        glue(args) if args.command == "glue" else same_document(args)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        sys.exit(f"sentence_prediction_data.py: error: {e}")


if __name__ == "__main__":
    main()

"""SWAG's CSV format (the released header with its unnamed index column, quoted fields), the
choices built from it, the stdlib SWAG builder, and errors naming file and line."""
import csv

import pytest

from fairseq_normformer.corpus.finetune_tasks import build_finetune_data
from fairseq_normformer.data.swag import SwagExample, choice_texts, read_swag

HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
ROW = '0,lsmdc3001,1,"She opens it, then","She opens it, then",then,gold,"she smiles.",falls.,runs  away.,sits,2\n'


def test_reads_swags_released_layout_by_column_name(tmp_path):
    path = tmp_path / "val.csv"
    path.write_text(HEADER + ROW + ROW.replace(",2\n", ",0\n"))
    examples = read_swag(path)
    assert examples[0] == SwagExample("She opens it, then", "then", ["she smiles.", "falls.", "runs away.", "sits"], 2)
    assert [e.label for e in examples] == [2, 0]
    assert choice_texts(examples[0]) == ["She opens it, then", "then she smiles.", "then falls.", "then runs away.",
                                         "then sits"]  # fmt: skip


@pytest.mark.parametrize(
    "text, message",
    [
        (HEADER + ROW + "1,x,2,a,b,c,gold,e0,e1\n", r"val.csv:3: malformed row: expected 12 fields"),
        (HEADER + ROW.replace(",2\n", ",4\n"), r"val.csv:2: label '4' is not one of 0-3"),
        (HEADER.replace("ending3,", ""), r"val.csv:1: not a SWAG CSV header: missing column\(s\) ending3"),
    ],
)  # fmt: skip
def test_malformed_swag_csv_names_file_and_line(tmp_path, text, message):
    path = tmp_path / "val.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_swag(path)


def test_stdlib_swag_puts_the_true_next_sentence_among_distractors(tmp_path):
    counts = build_finetune_data(tmp_path / "swag", "swag", max_chars=40_000)
    assert counts["train"]["examples"] > 50 and counts["valid"]["examples"] >= 4
    with (tmp_path / "swag" / "val.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row, example in zip(rows, read_swag(tmp_path / "swag" / "val.csv")):
        assert row["startphrase"] == f"{row['sent1']} {row['sent2']}"
        assert len(set(example.endings)) == 4  # distractors come from other sentences
    # the distractors are the right endings of other examples of the split (never of another split)
    right = [r[f"ending{r['label']}"] for r in rows]
    for k, r in enumerate(rows):
        distractors = [r[f"ending{e}"] for e in range(4) if str(e) != r["label"]]
        assert all(d in right[:k] + right[k + 1 :] for d in distractors)

"""Bad fine-tuning data (SQuAD JSON, CoNLL) stops fairseq-train and normformer-predict with one line
naming the file and the line at fault, before anything is written: the save directory, the data
and --out are as they were. fairseq-train's and normformer-predict's entry points run in this
process (the error is raised before training); the console scripts are run once each to check that
the error is all they print after their start-up warnings."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fairseq_cli import train

from fairseq_normformer.checks import BadInput
from fairseq_normformer.cli import predict

from ..conftest import TINY, TRAIN, USER_DIR, run_cli

CONTEXT = "The parser reads the file line by line. It returns a list of records and raises ValueError on bad input."
ANSWERS = {"q1": "the file", "q2": "a list of records", "q3": "ValueError"}
SENTENCES = [[("Call", "O"), ("json", "B-MOD"), ("loads", "I-MOD"), ("now", "O")],
             [("The", "O"), ("os", "B-MOD"), ("module", "O")],
             [("Ask", "O"), ("Guido", "PERSON"), ("first", "O")]]  # fmt: skip
OTHER_TAG = 'Guido NN _ PERSON'  # a tag outside IOB1/BIO/IOBES: training needs --allow-other-tags


def squad(answers=ANSWERS, starts=None) -> str:
    starts = starts or {}
    qas = [{"id": qid, "question": f"Question {qid}?", "answers": [{"text": text,
            "answer_start": starts.get(qid, CONTEXT.find(text))}]} for qid, text in answers.items()]  # fmt: skip
    return json.dumps({"data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]}, indent=1)


def conll(sentences=SENTENCES) -> str:
    return "-DOCSTART- -X- -X- O\n\n" + "".join("".join(f"{w} NN _ {t}\n" for w, t in s) + "\n" for s in sentences)


def finetune_args(data, corpus, save_dir, task, *extra) -> list:
    return [data, "--user-dir", USER_DIR, "--task", task, "--criterion", task, "--arch", "postln_bert_base", *TINY,
            "--max-positions", "64", "--max-seq-length", "64", "--spm-model", corpus.spm_model,
            "--dict", corpus.data_bin / "dict.txt", *TRAIN, "--max-update", "1", "--required-batch-size-multiple",
            "1", "--save-dir", save_dir, "--no-epoch-checkpoints", *extra]  # fmt: skip


TASKS = {  # task: (data files, extra fairseq-train arguments)
    "extractive_qa": ({"train.json": squad(), "valid.json": squad()}, []),
    "token_classification": ({"train.conll": conll(), "valid.conll": conll(SENTENCES[:2])}, ["--allow-other-tags"]),
}


@pytest.fixture(scope="module")
def finetuned(tiny_bert_corpus, tmp_path_factory):
    """Per task: its data directory and the save directory of one update of fine-tuning."""
    runs = {}
    for task, (files, extra) in TASKS.items():
        data, save_dir = tmp_path_factory.mktemp(f"{task}-data"), tmp_path_factory.mktemp(task)
        for name, text in files.items():
            (data / name).write_text(text)
        run_cli(["fairseq-train", *finetune_args(data, tiny_bert_corpus, save_dir, task, *extra)])
        runs[task] = data, save_dir
    return runs


def copy_run(finetuned, task, tmp_path):
    data, save_dir = finetuned[task]
    return shutil.copytree(data, tmp_path / "data"), shutil.copytree(save_dir, tmp_path / "checkpoints")


def snapshot(*directories) -> list:
    return [{path.name: path.read_bytes() for path in sorted(directory.iterdir())} for directory in directories]


def line_of(text: str, marker: str) -> int:
    """The line of the last occurrence of ``marker``."""
    return [i for i, line in enumerate(text.splitlines(), start=1) if marker in line][-1]


# (task, file, its bad content, the marker of the line at fault, the message after FILE: {line} is that line)
BAD_DATA = {
    "answer_start off": ("extractive_qa", "valid.json", squad(starts={"q2": 3}), '"answer_start": 3',
                         ":{line}: " + re.escape(f"question 'q2': answer 'a list of records' is not at its "
                                                 f"answer_start 3 (the context has {CONTEXT[3:20]!r} there; the "
                                                 f"answer is at {CONTEXT.index('a list of records')})")),
    "answer not in the context": ("extractive_qa", "train.json", squad({**ANSWERS, "q3": "TypeError"}),
                                  '"text": "TypeError"', ":{line}: question 'q3': answer 'TypeError' does not occur "
                                  "in the context"),
    "duplicate question id": ("extractive_qa", "valid.json", squad().replace('"q3"', '"q1"'), '"id": "q1"',
                              ":{line}: question 'q1': id used twice \\(first at line 10\\)"),
    "no questions": ("extractive_qa", "valid.json", json.dumps({"data": []}), None, ": no questions"),
    "empty train.conll": ("token_classification", "train.conll", "", None, ": no sentences"),
    "empty valid.conll": ("token_classification", "valid.conll", "", None, ": no sentences"),
    "wrong number of columns": ("token_classification", "valid.conll", conll(SENTENCES[:2]).replace("os NN", "os"),
                                "os _ B-MOD", ":{line}: 3 columns in 'os _ B-MOD', but line 3 has 4"),
}  # fmt: skip


def expected_message(path: Path, marker, message: str) -> str:
    line = line_of(path.read_text(), marker) if marker else None
    return re.escape(str(path)) + message.format(line=line)


def fairseq_train_fails(args, message, directories, monkeypatch):
    before = snapshot(*directories)
    monkeypatch.setattr(sys, "argv", ["fairseq-train", *map(str, args)])
    with pytest.raises(BadInput, match=message):
        train.cli_main()
    assert snapshot(*directories) == before


@pytest.mark.parametrize("case", BAD_DATA)
@pytest.mark.slow
def test_fairseq_train_stops_at_bad_data(case, finetuned, tiny_bert_corpus, tmp_path, monkeypatch):
    task, name, text, marker, message = BAD_DATA[case]
    data, save_dir = copy_run(finetuned, task, tmp_path)
    (data / name).write_text(text)
    args = finetune_args(data, tiny_bert_corpus, save_dir, task, *TASKS[task][1], "--max-update", "2")
    fairseq_train_fails(args, f"^{expected_message(data / name, marker, message)}$", [data, save_dir], monkeypatch)


@pytest.mark.parametrize("tag, line, marker", [("PERSON", OTHER_TAG, OTHER_TAG),
                                               ("Z-FOO", "json NN _ B-MOD", "json NN _ Z-FOO")])
def test_tags_outside_iob_need_allow_other_tags(tag, line, marker, finetuned, tiny_bert_corpus, tmp_path, monkeypatch):
    """The fixture fine-tuned on the tag PERSON with --allow-other-tags; without it, the same data is refused."""
    data, save_dir = copy_run(finetuned, "token_classification", tmp_path)
    (data / "train.conll").write_text(conll().replace(line, marker))  # a line, then its replacement
    message = expected_message(data / "train.conll", marker, f":{{line}}: tag '{tag}' is not O or B-, I-, E-, S- "
                               "and a type \\(IOB1, BIO, IOBES\\): pass --allow-other-tags to train on other tags")
    args = finetune_args(data, tiny_bert_corpus, save_dir, "token_classification", "--max-update", "2")
    fairseq_train_fails(args, f"^{message}$", [data, save_dir], monkeypatch)


def test_polynomial_decay_without_total_num_update(finetuned, tiny_bert_corpus, tmp_path, monkeypatch):
    """fairseq: an 81-line hydra traceback ending in "Error merging override lr_scheduler.total_num_update=null"."""
    data, save_dir = copy_run(finetuned, "extractive_qa", tmp_path)
    args = finetune_args(data, tiny_bert_corpus, save_dir, "extractive_qa", "--lr-scheduler", "polynomial_decay")
    message = "^--lr-scheduler polynomial_decay needs --total-num-update N, the number of updates to decay over"
    fairseq_train_fails(args, message, [data, save_dir], monkeypatch)


PREDICT_CASES = ["answer_start off", "answer not in the context", "duplicate question id", "no questions",
                 "empty valid.conll", "wrong number of columns"]  # fmt: skip


def predict_fails(finetuned, task, text, suffix, tmp_path) -> str:
    """normformer-predict's one-line error (its SystemExit) on an input file holding ``text``."""
    data, save_dir = finetuned[task]
    bad = tmp_path / f"input{suffix}"
    bad.write_text(text)
    before = snapshot(data, save_dir)
    command = "qa" if task == "extractive_qa" else "tags"
    with pytest.raises(SystemExit) as stop:
        predict.main([command, str(save_dir / "checkpoint_last.pt"), str(bad), "--out", str(tmp_path / "out")])
    assert snapshot(data, save_dir) == before and not (tmp_path / "out").exists()
    return bad, stop.value.code


@pytest.mark.parametrize("case", PREDICT_CASES)
def test_normformer_predict_stops_at_bad_data(case, finetuned, tmp_path):
    task, name, text, marker, message = BAD_DATA[case]
    bad, error = predict_fails(finetuned, task, text, Path(name).suffix, tmp_path)
    assert re.fullmatch(f"normformer-predict: error: {expected_message(bad, marker, message)}", error)


def test_predict_tags_with_a_label_training_lacked(finetuned, tmp_path):
    bad, error = predict_fails(finetuned, "token_classification", conll([[("a", "O"), ("b", "B-CLASS")]]), ".conll",
                               tmp_path)  # fmt: skip
    assert error == (f"normformer-predict: error: {bad}:4: label 'B-CLASS' does not occur in the training data "
                     "(B-MOD, I-MOD, O, PERSON)")  # fmt: skip


def console_script(name: str, *args) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).parent / name), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_console_scripts_print_one_line(finetuned, tiny_bert_corpus, tmp_path):
    """The error is the last line on stderr and there is no traceback (checks.BadInput's excepthook)."""
    data, _ = copy_run(finetuned, "extractive_qa", tmp_path)
    (data / "valid.json").write_text(json.dumps({"data": []}))
    save_dir = tmp_path / "new" / "checkpoints"  # fairseq-train creates it, then reads the data
    trained = console_script("fairseq-train", *finetune_args(data, tiny_bert_corpus, save_dir, "extractive_qa"))
    assert sorted(tmp_path.iterdir()) == [tmp_path / "checkpoints", data]  # the refused run removed what it created
    bad = tmp_path / "empty.conll"
    bad.write_text("")
    checkpoint = finetuned["token_classification"][1] / "checkpoint_last.pt"
    predicted = console_script("normformer-predict", "tags", checkpoint, bad, "--out", tmp_path / "out")
    for result, line in [(trained, f"fairseq-train: error: {data / 'valid.json'}: no questions"),
                         (predicted, f"normformer-predict: error: {bad}: no sentences")]:  # fmt: skip
        assert result.returncode != 0
        assert result.stderr.strip().splitlines()[-1] == line
        assert "Traceback" not in result.stderr


def test_only_bad_input_loses_its_traceback(capsys, monkeypatch):
    """The excepthook the plugin installs: BadInput is one line, any other exception keeps its traceback."""
    monkeypatch.setattr(sys, "argv", ["fairseq-train"])
    try:
        raise RuntimeError("a bug")
    except RuntimeError as error:
        sys.excepthook(type(error), error, error.__traceback__)
    sys.excepthook(BadInput, BadInput("bad data"), None)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):"
    assert err[-2:] == ["RuntimeError: a bug", "fairseq-train: error: bad data"]

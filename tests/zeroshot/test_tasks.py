"""The five readers on files in the public formats, built from held-out standard-library text:
the labelled choice must be the text that really follows; the alternative layouts of each
dataset must give the same examples; malformed files must be refused with the file and line."""
import csv
import json

import pytest

from fairseq_normformer.zeroshot.stdlib_tasks import build_stdlib_tasks, sentence_stream
from fairseq_normformer.zeroshot.tasks import FormatError, hellaswag_preprocess, load_task

CHOICES = {"hellaswag": 4, "piqa": 2, "winogrande": 2, "storycloze": 2, "openbookqa": 4}


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_label_points_at_the_real_text(task_files):
    text = " ".join(sentence_stream(task_files["piqa"].parent.parent / "heldout.txt"))
    for name, path in task_files.items():
        examples = load_task(name, path)
        assert len(examples) == 12
        for example in examples:
            assert len(example.pairs) == CHOICES[name]
            context, continuation = example.pairs[example.label]
            if name == "hellaswag":  # "<activity label>: <ctx_a> <ctx_b capitalized>"
                assert context.startswith("Documentation: ")
                context = context[len("Documentation: ") :]
            assert (context + continuation).lower() in text.lower(), (name, context, continuation)
            if name == "winogrande":  # partial scoring: one continuation, the options in the context
                assert len({cont for _, cont in example.pairs}) == 1
            else:  # one context, the choices in the continuation
                assert len({ctx for ctx, _ in example.pairs}) == 1
                assert all(cont.startswith(" ") for _, cont in example.pairs)


def test_hellaswag_prompt_and_preprocessing(task_files, tmp_path):
    records = read_jsonl(task_files["hellaswag"])
    examples = load_task("hellaswag", task_files["hellaswag"])
    for record, example in zip(records, examples):
        expected = f"{record['activity_label']}: {record['ctx_a']} {record['ctx_b'].capitalize()}"
        assert example.pairs[0][0] == expected
        assert [cont for _, cont in example.pairs] == [" " + ending for ending in record["endings"]]
    # only 'ctx' (no ctx_a/ctx_b, no activity label), labels as strings
    plain = [{"ctx": r["ctx"], "endings": r["endings"], "label": str(r["label"])} for r in records]
    for record, example in zip(plain, load_task("hellaswag", write_jsonl(tmp_path / "hs.jsonl", plain))):
        assert example.pairs[0][0] == record["ctx"] and example.label == int(record["label"])
    # WikiHow markers, as lm-eval's HellaSwag preprocessing: ' [title]' -> '. ', [tags] dropped
    assert hellaswag_preprocess(" How to boil rice [title] Rinse  the rice [step] twice ") == (
        "How to boil rice. Rinse the rice twice"
    )


def test_piqa_labels_inline_or_in_the_labels_file(task_files, tmp_path):
    from_lst = load_task("piqa", task_files["piqa"])
    labels = (task_files["piqa"].parent / "piqa-labels.lst").read_text().split()
    inline = [dict(r, label=int(y)) for r, y in zip(read_jsonl(task_files["piqa"]), labels)]
    assert load_task("piqa", write_jsonl(tmp_path / "valid.jsonl", inline)) == from_lst
    unlabeled = write_jsonl(tmp_path / "test.jsonl", read_jsonl(task_files["piqa"]))
    with pytest.raises(FormatError, match="test-labels.lst"):
        load_task("piqa", unlabeled)
    (tmp_path / "short.lst").write_text("0\n1\n")
    with pytest.raises(FormatError, match="2 labels for the 12 examples"):
        load_task("piqa", unlabeled, tmp_path / "short.lst")


def test_storycloze_csv_and_jsonl_agree(task_files, tmp_path):
    with open(task_files["storycloze"], newline="") as f:
        rows = list(csv.DictReader(f))
    hf_rows = [{**{f"input_sentence_{k}": row[f"InputSentence{k}"] for k in range(1, 5)},
                "sentence_quiz1": row["RandomFifthSentenceQuiz1"], "sentence_quiz2": row["RandomFifthSentenceQuiz2"],
                "answer_right_ending": int(row["AnswerRightEnding"])} for row in rows]  # fmt: skip
    from_jsonl = load_task("storycloze", write_jsonl(tmp_path / "sc.jsonl", hf_rows))
    assert from_jsonl == load_task("storycloze", task_files["storycloze"])
    row = rows[0]
    context = " ".join(row[f"InputSentence{k}"] for k in range(1, 5))
    assert from_jsonl[0].pairs == [(context, " " + row["RandomFifthSentenceQuiz1"]),
                                   (context, " " + row["RandomFifthSentenceQuiz2"])]  # fmt: skip


def test_openbookqa_huggingface_and_ai2_layouts_agree(task_files, tmp_path):
    records = read_jsonl(task_files["openbookqa"])

    def ai2_layout(r):
        choices = [{"text": t, "label": label} for t, label in zip(r["choices"]["text"], r["choices"]["label"])]
        question = {"stem": r["question_stem"], "choices": choices}
        return {"id": r["id"], "answerKey": r["answerKey"], "question": question}

    ai2 = [ai2_layout(r) for r in records]
    examples = load_task("openbookqa", task_files["openbookqa"])
    assert load_task("openbookqa", write_jsonl(tmp_path / "ob.jsonl", ai2)) == examples
    assert examples[0].label == "ABCD".index(records[0]["answerKey"])


def test_winogrande_partial_scoring_pairs(task_files):
    for record, example in zip(read_jsonl(task_files["winogrande"]), load_task("winogrande", task_files["winogrande"])):
        before, after = record["sentence"].split("_")
        assert example.pairs == [(before + record["option1"], after), (before + record["option2"], after)]
        assert example.label == int(record["answer"]) - 1


@pytest.mark.parametrize(
    "name, record, message",
    [
        ("winogrande", {"sentence": "A _ and a _.", "option1": "x", "option2": "y", "answer": "1"}, "exactly one '_'"),
        ("winogrande", {"sentence": "Ends with _", "option1": "x", "option2": "y", "answer": "1"}, "nothing follows"),
        ("winogrande", {"sentence": "The _ one.", "option1": "x", "option2": "y", "answer": ""}, "unlabeled test"),
        ("hellaswag", {"ctx": "A", "endings": ["b", "c"]}, "missing field 'label'"),
        ("openbookqa", {"question_stem": "Q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "B"}, "'B'"),
    ],
)
def test_malformed_records_name_file_and_line(tmp_path, name, record, message):
    path = write_jsonl(tmp_path / f"{name}.jsonl", [record])
    with pytest.raises(FormatError, match=message) as err:
        load_task(name, path)
    assert f"{path}:1" in str(err.value)


def test_bad_files_are_refused(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"goal": "x"}\nnot json\n')
    with pytest.raises(FormatError, match="bad.jsonl:2: not a JSON line"):
        load_task("piqa", tmp_path / "bad.jsonl")
    (tmp_path / "bad.csv").write_text("ctx,endings\n")
    with pytest.raises(FormatError, match="expected a .jsonl file"):
        load_task("hellaswag", tmp_path / "bad.csv")
    with pytest.raises(FileNotFoundError, match="piqa: file not found"):
        load_task("piqa", tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="unknown task 'copa'"):
        load_task("copa", tmp_path / "bad.jsonl")


def test_task_files_are_never_overwritten(task_files):
    with pytest.raises(FileExistsError, match="hellaswag.jsonl"):
        build_stdlib_tasks(task_files["piqa"].parent.parent / "heldout.txt", task_files["piqa"].parent)

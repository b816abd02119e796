"""The five multiple-choice tasks of the paper's Table 1, read from their public file formats and
turned into GPT-3's zero-shot prompts (Brown et al. 2020, Sec. 2.4 and Appendix G).

Each example becomes one (context, continuation) pair per choice; the model picks the choice
whose continuation scores best under the task's normalization (see ``evaluate.py``):

- HellaSwag (jsonl: ``ctx`` or ``ctx_a``/``ctx_b``, ``activity_label``, ``endings``, ``label``):
  "<activity_label>: <ctx>" -> " <ending>", per-token normalization.
- PIQA (jsonl: ``goal``, ``sol1``, ``sol2``; labels from a ``label`` field or the 0/1 lines of the
  ``*-labels.lst`` file beside it): "<goal>" -> " <sol>", per-token normalization.
- WinoGrande (jsonl: ``sentence`` with one ``_``, ``option1``, ``option2``, ``answer`` "1"/"2"):
  partial scoring: "<sentence up to _><option>" -> "<rest of the sentence>", the same continuation
  for both options (Trinh & Le 2018, as GPT-3).
- StoryCloze (the official csv: ``InputSentence1..4``, ``RandomFifthSentenceQuiz1/2``,
  ``AnswerRightEnding``; or jsonl with ``input_sentence_1..4``, ``sentence_quiz1/2``,
  ``answer_right_ending``): "<4 sentences>" -> " <ending>", per-token normalization.
- OpenBookQA (jsonl: ``question_stem``, ``choices`` {``text``, ``label``}, ``answerKey``; or AI2's
  ``question`` {``stem``, ``choices`` [{``text``, ``label``}]}): "<stem>" -> " <choice>",
  GPT-3's unconditional normalization with answer context "Answer:".
"""
import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple


@dataclass
class Example:
    pairs: List[Tuple[str, str]]  # (context, continuation) for each choice
    label: int  # index of the correct choice


@dataclass
class TaskSpec:
    name: str
    column: str  # the paper's Table 1 column
    read: Callable  # (path, labels_path) -> List[Example]
    normalization: str  # GPT-3's choice for the task, see evaluate.NORMALIZATIONS
    suffixes: Tuple[str, ...] = (".jsonl",)
    partial: bool = False  # the choices differ in the context, not in the scored continuation


class FormatError(ValueError):
    """A task file that is not in the expected public format; the message names file and line."""


def read_jsonl(path) -> List[Tuple[int, dict]]:
    """(line number, record) for each non-empty line of a JSON-lines file."""
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append((number, json.loads(line)))
                except json.JSONDecodeError as err:
                    raise FormatError(f"{path}:{number}: not a JSON line ({err})") from err
    if not records:
        raise FormatError(f"{path}: no examples")
    return records


def field(record: dict, key: str, where: str):
    if key not in record:
        raise FormatError(f"{where}: missing field {key!r} (fields: {', '.join(sorted(record))})")
    return record[key]


def label_index(value, choices: List[str], where: str) -> int:
    """The index of ``value`` in ``choices`` (labels are compared as strings: 1 and "1" agree)."""
    value = str(value).strip()
    if value not in choices:
        hint = " (an unlabeled test split?)" if value in ("", "None") else ""
        raise FormatError(f"{where}: label {value!r} is not one of {choices}{hint}")
    return choices.index(value)


# --- HellaSwag -----------------------------------------------------------------------------------
def hellaswag_preprocess(text: str) -> str:
    """WikiHow contexts carry ' [title]' and '[header]'-style markers; as lm-eval's GPT-3 replication."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def read_hellaswag(path, labels_path=None) -> List[Example]:
    examples = []
    for number, record in read_jsonl(path):
        where = f"{path}:{number}"
        if "ctx_a" in record:
            context = field(record, "ctx_a", where) + " " + field(record, "ctx_b", where).capitalize()
        else:
            context = field(record, "ctx", where)
        label = record.get("activity_label")
        context = hellaswag_preprocess(f"{label}: {context}" if label else context)
        endings = field(record, "endings", where)
        pairs = [(context, " " + hellaswag_preprocess(ending)) for ending in endings]
        examples.append(Example(pairs, label_index(field(record, "label", where), _indices(endings), where)))
    return examples


def _indices(choices) -> List[str]:
    return [str(i) for i in range(len(choices))]


# --- PIQA ----------------------------------------------------------------------------------------
def piqa_labels_path(path) -> Path:
    """PIQA ships ``valid.jsonl`` with ``valid-labels.lst``: the labels file beside the data."""
    path = Path(path)
    return path.with_name(f"{path.stem}-labels.lst")


def read_piqa(path, labels_path=None) -> List[Example]:
    records = read_jsonl(path)
    labels = [record.get("label") for _, record in records]
    if any(label is None for label in labels):
        labels_path = Path(labels_path) if labels_path else piqa_labels_path(path)
        if not labels_path.is_file():
            raise FormatError(f"{path}: no 'label' field and no labels file {labels_path} (PIQA's *-labels.lst)")
        labels = [line.strip() for line in labels_path.read_text().splitlines() if line.strip()]
        if len(labels) != len(records):
            raise FormatError(f"{labels_path} has {len(labels)} labels for the {len(records)} examples of {path}")
    examples = []
    for (number, record), label in zip(records, labels):
        where = f"{path}:{number}"
        goal = field(record, "goal", where).strip()
        solutions = [field(record, key, where).strip() for key in ("sol1", "sol2")]
        examples.append(Example([(goal, " " + sol) for sol in solutions], label_index(label, ["0", "1"], where)))
    return examples


# --- WinoGrande ----------------------------------------------------------------------------------
def winogrande_pairs(sentence: str, options: List[str], where: str) -> List[Tuple[str, str]]:
    """Partial scoring: the option fills the blank in the context; the text after the blank is the
    continuation, identical for every option, so only the context differs."""
    if sentence.count("_") != 1:
        raise FormatError(f"{where}: the sentence must hold exactly one '_' blank: {sentence!r}")
    before, after = sentence.split("_")
    if not after.strip():
        raise FormatError(f"{where}: nothing follows the blank to score: {sentence!r}")
    return [(before + option, after) for option in options]


def read_winogrande(path, labels_path=None) -> List[Example]:
    examples = []
    for number, record in read_jsonl(path):
        where = f"{path}:{number}"
        options = [field(record, "option1", where), field(record, "option2", where)]
        pairs = winogrande_pairs(field(record, "sentence", where), options, where)
        examples.append(Example(pairs, label_index(field(record, "answer", where), ["1", "2"], where)))
    return examples


# --- StoryCloze ----------------------------------------------------------------------------------
STORYCLOZE_CSV = (["InputSentence1", "InputSentence2", "InputSentence3", "InputSentence4"],
                  ["RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2"], "AnswerRightEnding")  # fmt: skip
STORYCLOZE_JSONL = (["input_sentence_1", "input_sentence_2", "input_sentence_3", "input_sentence_4"],
                    ["sentence_quiz1", "sentence_quiz2"], "answer_right_ending")  # fmt: skip


def read_storycloze(path, labels_path=None) -> List[Example]:
    if Path(path).suffix == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            records = list(enumerate(csv.DictReader(f), 2))  # line 1 is the header
        sentence_keys, ending_keys, answer_key = STORYCLOZE_CSV
    else:
        records = read_jsonl(path)
        sentence_keys, ending_keys, answer_key = STORYCLOZE_JSONL
    if not records:
        raise FormatError(f"{path}: no examples")
    examples = []
    for number, record in records:
        where = f"{path}:{number}"
        context = " ".join(field(record, key, where).strip() for key in sentence_keys)
        pairs = [(context, " " + field(record, key, where).strip()) for key in ending_keys]
        examples.append(Example(pairs, label_index(field(record, answer_key, where), ["1", "2"], where)))
    return examples


# --- OpenBookQA ----------------------------------------------------------------------------------
def _openbookqa_fields(record: dict, where: str):
    """(stem, choice texts, choice labels) from the HuggingFace layout or AI2's original one."""
    if "question_stem" in record:
        choices = field(record, "choices", where)
        return record["question_stem"], field(choices, "text", where), field(choices, "label", where)
    question = field(record, "question", where)
    choices = field(question, "choices", where)
    return field(question, "stem", where), [c["text"] for c in choices], [c["label"] for c in choices]


def read_openbookqa(path, labels_path=None) -> List[Example]:
    examples = []
    for number, record in read_jsonl(path):
        where = f"{path}:{number}"
        stem, texts, labels = _openbookqa_fields(record, where)
        pairs = [(stem.strip(), " " + text.strip()) for text in texts]
        examples.append(Example(pairs, label_index(field(record, "answerKey", where), list(labels), where)))
    return examples


TASKS: Dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("hellaswag", "HS", read_hellaswag, "token"),
        TaskSpec("piqa", "PI", read_piqa, "token"),
        TaskSpec("winogrande", "WG", read_winogrande, "none", partial=True),
        TaskSpec("storycloze", "SC", read_storycloze, "token", (".csv", ".jsonl")),
        TaskSpec("openbookqa", "OB", read_openbookqa, "unconditional"),
    )
}


def load_task(name: str, path, labels_path: Optional[str] = None) -> List[Example]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    spec = TASKS[name]
    if not Path(path).is_file():
        raise FileNotFoundError(f"{name}: file not found: {path}")
    if Path(path).suffix not in spec.suffixes:
        raise FormatError(f"{name}: expected a {' or '.join(spec.suffixes)} file, got {path}")
    return spec.read(path, labels_path)

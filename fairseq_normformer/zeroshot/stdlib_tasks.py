"""Small task files in the five public formats, made from real text (the standard-library
docstring corpus), for tests and the tiny Table 1 recipe. The real datasets cannot be downloaded
here, and no third-party text is committed: these are built at run time.

The right answer is always the text that really follows (the next sentence, the rest of the
sentence, the word that was blanked); wrong answers are the same kind of text taken from
elsewhere. Built from a held-out split, they measure whether a model learned the text's regularities.
"""
import csv
import json
import random
import re
from pathlib import Path
from typing import Dict, List

from ..corpus.stdlib import sentences

MIN_WORDS, MAX_WORDS, MAX_CHARS = 5, 30, 200
MIN_PROSE = 0.85  # share of letters and spaces: keeps prose, drops code-like sentences (many tokens)
WORD = re.compile(r"^[A-Za-z]{4,}$")
FILES = {
    "hellaswag": "hellaswag.jsonl",
    "piqa": "piqa.jsonl",  # labels in piqa-labels.lst, as PIQA ships them
    "winogrande": "winogrande.jsonl",
    "storycloze": "storycloze.csv",
    "openbookqa": "openbookqa.jsonl",
}


def is_usable(sentence: str) -> bool:
    """Prose (not all capitals, like licence text) of MIN_WORDS..MAX_WORDS words and at most
    MAX_CHARS characters, without square brackets (HellaSwag's preprocessing deletes bracketed text)."""
    prose = sum(c.isalpha() or c == " " for c in sentence) / max(len(sentence), 1)
    size = MIN_WORDS <= len(sentence.split()) <= MAX_WORDS and len(sentence) <= MAX_CHARS
    return size and prose >= MIN_PROSE and not sentence.isupper() and not any(c in sentence for c in "[]")


def sentence_stream(raw_text) -> List[str]:
    """The usable sentences of a one-paragraph-a-line text file, in order."""
    lines = Path(raw_text).read_text(encoding="utf-8").splitlines()
    return [s for line in lines for s in sentences(line) if is_usable(s)]


def _shuffled_choices(right: str, wrong: List[str], rng: random.Random):
    """(choices, index of the right one) with the right answer at a random place."""
    position = rng.randrange(len(wrong) + 1)
    return wrong[:position] + [right] + wrong[position:], position


def _others(pool: List[str], exclude: str, k: int, rng: random.Random) -> List[str]:
    candidates = [text for text in pool if text != exclude]
    return rng.sample(candidates, k)


def hellaswag(stream, n, rng) -> List[dict]:
    """Context: a sentence and the first two words of the next; endings: the rest of the next
    sentence, or the rest of three other sentences."""
    starts = rng.sample(range(len(stream) - 1), min(n, len(stream) - 1))
    rests = [" ".join(s.split()[2:]) for s in stream]
    records = []
    for i in starts:
        words = stream[i + 1].split()
        ctx_b = " ".join(words[:2])
        endings, label = _shuffled_choices(rests[i + 1], _others(rests, rests[i + 1], 3, rng), rng)
        records.append({"ind": i, "activity_label": "Documentation", "ctx_a": stream[i], "ctx_b": ctx_b,
                        "ctx": f"{stream[i]} {ctx_b}", "endings": endings, "label": label,
                        "split": "val", "split_type": "indomain", "source_id": f"stdlib~{i}"})  # fmt: skip
    return records


def piqa(stream, n, rng) -> List[dict]:
    """Goal: a sentence; solutions: the next sentence and another one. Labels go to a .lst file."""
    records = []
    for i in rng.sample(range(len(stream) - 1), min(n, len(stream) - 1)):
        solutions, label = _shuffled_choices(stream[i + 1], _others(stream, stream[i + 1], 1, rng), rng)
        records.append({"goal": stream[i], "sol1": solutions[0], "sol2": solutions[1], "label": label})
    return records


def winogrande(stream, n, rng) -> List[dict]:
    """A word in the middle of a sentence becomes '_'; the options are it and a word of another sentence."""
    vocabulary = sorted({w for s in stream for w in s.split() if WORD.match(w)})
    records = []
    for i in rng.sample(range(len(stream)), len(stream)):
        words = stream[i].split()
        middle = [j for j in range(1, len(words) - 1) if WORD.match(words[j])]
        if not middle or "_" in stream[i]:  # the blank must be the sentence's only '_'
            continue
        j = rng.choice(middle)
        options, label = _shuffled_choices(words[j], _others(vocabulary, words[j], 1, rng), rng)
        sentence = " ".join(words[:j] + ["_"] + words[j + 1 :])
        records.append({"qID": f"stdlib-{i}", "sentence": sentence, "option1": options[0],
                        "option2": options[1], "answer": str(label + 1)})  # fmt: skip
        if len(records) == n:
            break
    return records


def storycloze(stream, n, rng) -> List[dict]:
    """Four consecutive sentences; endings: the fifth, or a sentence from elsewhere."""
    records = []
    for i in rng.sample(range(len(stream) - 4), min(n, len(stream) - 4)):
        endings, label = _shuffled_choices(stream[i + 4], _others(stream, stream[i + 4], 1, rng), rng)
        record = {"InputStoryid": f"stdlib-{i}"}
        record.update({f"InputSentence{k + 1}": stream[i + k] for k in range(4)})
        record.update({"RandomFifthSentenceQuiz1": endings[0], "RandomFifthSentenceQuiz2": endings[1],
                       "AnswerRightEnding": label + 1})  # fmt: skip
        records.append(record)
    return records


def openbookqa(stream, n, rng) -> List[dict]:
    """Stem: the first half of a sentence; choices: its second half, or that of three others."""
    halves = [(" ".join(s.split()[: len(s.split()) // 2]), " ".join(s.split()[len(s.split()) // 2 :])) for s in stream]
    records = []
    for i in rng.sample(range(len(stream)), min(n, len(stream))):
        stem, right = halves[i]
        texts, label = _shuffled_choices(right, _others([h[1] for h in halves], right, 3, rng), rng)
        records.append({"id": f"stdlib-{i}", "question_stem": stem,
                        "choices": {"text": texts, "label": list("ABCD")}, "answerKey": "ABCD"[label]})  # fmt: skip
    return records


def _write_jsonl(path: Path, records: List[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def build_stdlib_tasks(raw_text, out_dir, examples: int = 50, seed: int = 0) -> Dict[str, Path]:
    """Write the five task files (names in FILES) into ``out_dir``; returns {task: path}."""
    stream = sentence_stream(raw_text)
    if len(stream) < 10:
        raise ValueError(f"{raw_text} holds only {len(stream)} usable sentences; at least 10 are needed")
    out_dir = Path(out_dir)
    paths = {name: out_dir / filename for name, filename in FILES.items()}
    existing = [str(p) for p in [*paths.values(), out_dir / "piqa-labels.lst"] if p.exists()]
    if existing:
        raise FileExistsError(f"task files already exist, not overwritten: {', '.join(existing)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    _write_jsonl(paths["hellaswag"], hellaswag(stream, examples, rng))
    piqa_records = piqa(stream, examples, rng)
    _write_jsonl(paths["piqa"], [{k: r[k] for k in ("goal", "sol1", "sol2")} for r in piqa_records])
    (out_dir / "piqa-labels.lst").write_text("".join(f"{r['label']}\n" for r in piqa_records))
    _write_jsonl(paths["winogrande"], winogrande(stream, examples, rng))
    stories = storycloze(stream, examples, rng)
    with paths["storycloze"].open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(stories[0]))
        writer.writeheader()
        writer.writerows(stories)
    _write_jsonl(paths["openbookqa"], openbookqa(stream, examples, rng))
    return paths

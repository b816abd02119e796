"""SQuAD windows and answer mapping, CoNLL reading, and the errors on bad input (file and line)."""
import json
import re

import pytest
import torch
from fairseq.data import Dictionary

from fairseq_normformer.checks import BadInput
from fairseq_normformer.data.conll import IGNORE, check_labels, check_tag_scheme, encode_sentence, read_conll
from fairseq_normformer.data.squad import best_span, encode_squad, read_squad
from fairseq_normformer.data.subwords import SubwordEncoder


@pytest.fixture(scope="module")
def encoder(tiny_bert_corpus):
    return SubwordEncoder(tiny_bert_corpus.spm_model, Dictionary.load(str(tiny_bert_corpus.data_bin / "dict.txt")))


def squad_file(tmp_path, qas, context, name="s.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}, indent=1))
    return path


CONTEXT = " ".join(f"Sentence {i} says that the value of field_{i} is computed lazily." for i in range(40))


def test_windows_cover_the_passage_and_targets_decode_to_the_gold_text(tmp_path, encoder):
    answers = ["field_3 is computed lazily.", "Sentence 21 says", "value of field_39"]
    qas = [{"id": f"q{i}", "question": "Where?", "answers": [{"text": a, "answer_start": CONTEXT.index(a)}]}
           for i, a in enumerate(answers)]  # fmt: skip
    questions = encode_squad(read_squad(squad_file(tmp_path, qas, CONTEXT), False), encoder, 48, 16, 8)
    for q, gold in zip(questions, answers):
        assert len(q.windows) > 5 and all(len(w.tokens) <= 48 for w in q.windows)
        covered = [w.first_piece + i for w in q.windows for i, best in enumerate(w.max_context) if best]
        assert covered == list(range(len(q.word_of)))  # each piece has exactly one window of most context
        assert [w.first_piece for w in q.windows[:3]] == [0, 16, 32]
        targets = [w for w in q.windows if w.start]
        assert targets, "the answer lies in some window"
        # logits peaked at the target positions of the window where the answer has most context
        starts = [torch.full((len(w.tokens),), -5.0) for w in q.windows]
        ends = [torch.full((len(w.tokens),), -5.0) for w in q.windows]
        for w, s, e in zip(q.windows, starts, ends):
            if w.start:
                s[w.start], e[w.end] = 5.0, 5.0
        assert best_span(q, starts, ends, max_answer_length=30).text == gold


@pytest.mark.parametrize(
    "qa, message, at",
    [
        ({"id": "bad", "question": "?", "answers": [{"text": "value of", "answer_start": 3}]},
         re.escape(f"question 'bad': answer 'value of' is not at its answer_start 3 (the context has "
                   f"{CONTEXT[3:11]!r} there; the answer is at {CONTEXT.index('value of')})"), '"answer_start": 3'),
        ({"id": "absent", "question": "?", "answers": [{"text": "eagerly", "answer_start": 0}]},
         r"question 'absent': answer 'eagerly' does not occur in the context", '"text": "eagerly"'),
        ({"id": "ok", "question": "?", "answers": [{"text": "Sentence", "answer_start": 0}]},
         r"question 'ok': id used twice \(first at line 10\)", None),
        ({"id": "none", "question": "?", "answers": [], "is_impossible": True},
         r"question 'none': is_impossible \(SQuAD v2.0\): pass --version-2-with-negative",
         '"is_impossible"'),
    ],
)  # fmt: skip
def test_bad_squad_answers_name_file_line_and_question(tmp_path, qa, message, at):
    """The line is the one of the field at fault (the second question's id when an id is used twice)."""
    good = {"id": "ok", "question": "?", "answers": [{"text": "Sentence", "answer_start": 0}]}
    path = squad_file(tmp_path, [good, qa], CONTEXT)
    lines = path.read_text().splitlines()
    assert lines[9].strip() == '"id": "ok",'  # line 10: the first question's id
    at_lines = [i + 1 for i, line in enumerate(lines) if (at or '"id": "ok"') in line]
    with pytest.raises(BadInput, match=f"s.json:{at_lines[-1]}: {message}"):
        read_squad(path, allow_no_answer=False)


def test_squad_file_without_questions(tmp_path):
    with pytest.raises(BadInput, match=r"s.json: no questions"):
        read_squad(squad_file(tmp_path, [], CONTEXT), allow_no_answer=False)


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n  {"title": "t",\n   "paragraphs": [}\n]}')
    with pytest.raises(ValueError, match=r"broken.json:3: malformed JSON"):
        read_squad(path, allow_no_answer=False)


def test_conll_reading_first_subword_labels_and_errors(tmp_path, encoder):
    path = tmp_path / "train.conll"
    path.write_text("-DOCSTART- -X- -X- O\n\nCall NN B-NP O\nos.path.join NN I-NP B-FUNC\nnow RB O O\n\n"
                    "x NN B-NP B-PARAM\n")
    sentences = read_conll(path)
    assert [s.words for s in sentences] == [["Call", "os.path.join", "now"], ["x"]]
    labels = {"O": 0, "B-FUNC": 1, "B-PARAM": 2}
    encoded = encode_sentence(sentences[0], encoder, labels, max_seq_length=64)
    assert [encoded.targets[p] for p in encoded.first_pieces] == [0, 1, 0]
    assert sum(t != IGNORE for t in encoded.targets) == 3 and len(encoded.tokens) > 5  # join has several pieces

    (tmp_path / "bad.conll").write_text("Call O\nonlyoneword\n")
    with pytest.raises(ValueError, match=r"bad.conll:2: malformed CoNLL line 'onlyoneword'"):
        read_conll(tmp_path / "bad.conll")
    (tmp_path / "valid.conll").write_text("a O\n\nb O\nc B-CLASS\n")
    with pytest.raises(ValueError, match=r"valid.conll:4: label 'B-CLASS' does not occur in the training data"):
        check_labels(read_conll(tmp_path / "valid.conll"), sorted(labels), tmp_path / "valid.conll")


@pytest.mark.parametrize(
    "text, message",
    [
        ("a NN O\nb NN\n", r"bad.conll:2: 2 columns in 'b NN', but line 1 has 3"),
        ("-DOCSTART- O\n\n", r"bad.conll: no sentences"),
        ("", r"bad.conll: no sentences"),
    ],
)
def test_conll_file_errors(text, message, tmp_path):
    (tmp_path / "bad.conll").write_text(text)
    with pytest.raises(BadInput, match=message):
        read_conll(tmp_path / "bad.conll")


@pytest.mark.parametrize("tag", ["PERSON", "Z-FOO", "B-", "o"])
def test_tags_outside_iob_bio_iobes(tag, tmp_path):
    (tmp_path / "train.conll").write_text(f"a O\nb B-X\n\nc E-X\nd S-X\ne I-X\nf {tag}\n")
    sentences = read_conll(tmp_path / "train.conll")
    check_tag_scheme(sentences[:1], tmp_path / "train.conll")  # O, B-, and E-, S-, I- are fine
    with pytest.raises(BadInput, match=f"train.conll:7: tag '{tag}' is not O or B-, I-, E-, S- and a type"):
        check_tag_scheme(sentences, tmp_path / "train.conll")

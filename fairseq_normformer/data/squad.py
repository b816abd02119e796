"""SQuAD v1.1/v2.0 for extractive QA: reading the JSON, ``[CLS] question [SEP] passage [SEP]``
windows with a stride (BERT's ``run_squad.py``), and mapping predicted pieces back to characters.

The passage is split into whitespace-separated words and each word into pieces
(``data/subwords.py``); a predicted span of pieces becomes the characters from its first word's
start to its last word's end, so answers are always exact substrings of the original passage.
"""
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from ..checks import BadInput
from .subwords import SubwordEncoder, word_spans

NO_ANSWER = 0  # target position of an answer that is not in the window: [CLS]


@dataclass
class SquadQuestion:
    qid: str
    question: str
    context: str
    answers: list  # [(text, char_start)], all given (dev sets have several)
    is_impossible: bool


@dataclass
class Window:
    """One input of the model: ``[CLS] question [SEP] passage[first:first+len] [SEP]``."""

    tokens: list
    passage_offset: int  # index in ``tokens`` of the window's first passage piece
    first_piece: int  # index of that piece in the whole passage
    max_context: list  # per passage piece of the window: is this its window with the most context?
    start: int = NO_ANSWER  # target positions in ``tokens``
    end: int = NO_ANSWER


@dataclass
class EncodedQuestion:
    question: SquadQuestion
    words: list  # (start, end) characters of the passage's words
    word_of: list  # per passage piece, its word
    windows: list = field(default_factory=list)


class BadQuestion(ValueError):
    """A question's problem; ``within`` (keys from the question) and ``key`` say where in the file."""

    def __init__(self, message: str, within=(), key=None):
        super().__init__(message)
        self.within, self.key = within, key


class _LocatedObject(dict):
    span = (0, 0)  # its characters in the file


def _located_object(s_and_end, *args, **kwargs):
    value, end = json.decoder.JSONObject(s_and_end, *args, **kwargs)
    located = _LocatedObject(value)
    located.span = (s_and_end[1] - 1, end)
    return located, end


class _LocatingDecoder(json.JSONDecoder):
    """json's pure-Python decoder, keeping where each object is (only for error messages: it is slow)."""

    def __init__(self):
        super().__init__()
        self.parse_object = _located_object
        self.scan_once = json.scanner.py_make_scanner(self)


def json_line(raw: str, path: list, key=None) -> int:
    """The line of the object at ``path`` (keys and indices from the top) or of its ``key``."""
    node = _LocatingDecoder().decode(raw)
    for step in path:
        node = node[step]
    start, end = node.span
    position = raw.find(json.dumps(key), start, end) if key else -1
    return raw.count("\n", 0, position if position >= 0 else start) + 1


def read_squad(path, allow_no_answer: bool) -> list:
    """The questions of a SQuAD JSON file. Errors (BadInput) name the file and line: malformed JSON,
    missing fields, an answer whose text is not at its ``answer_start`` or not in the context at all,
    a question without an answer (unless ``allow_no_answer``: SQuAD v2.0, ``is_impossible``), a
    question id used twice, a file without questions."""
    raw = Path(path).read_text(encoding="utf-8")
    try:
        articles = json.loads(raw)["data"]
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
    except (KeyError, TypeError):
        raise BadInput(f"{path}: not SQuAD JSON (no top-level 'data' list)") from None
    questions, where = [], {}  # where: question id -> its path in the file
    for a, article in enumerate(articles):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            for q, qa in enumerate(paragraph.get("qas", [])):
                at = ["data", a, "paragraphs", p, "qas", q]
                try:
                    if qa.get("id") in where:
                        raise BadQuestion(f"id used twice (first at line {json_line(raw, where[qa['id']], 'id')})",
                                          (), "id")  # fmt: skip
                    questions.append(_question(paragraph, qa, allow_no_answer))
                except BadQuestion as e:
                    line = json_line(raw, at + list(e.within), e.key)
                    raise BadInput(f"{path}:{line}: question {qa.get('id')!r}: {e}") from None
                where[qa["id"]] = at
    if not questions:
        raise BadInput(f"{path}: no questions")
    return questions


def _question(paragraph: dict, qa: dict, allow_no_answer: bool) -> SquadQuestion:
    for name, owner in (("id", qa), ("question", qa), ("context", paragraph)):
        if name not in owner:
            raise BadQuestion(f"missing field {name!r}")
    context = paragraph["context"]
    answers = [_answer(context, answer, ("answers", i)) for i, answer in enumerate(qa.get("answers", []))]
    is_impossible = bool(qa.get("is_impossible", False))
    if is_impossible and not allow_no_answer:
        raise BadQuestion("is_impossible (SQuAD v2.0): pass --version-2-with-negative", (), "is_impossible")
    if not answers and not is_impossible:
        raise BadQuestion("no answers and not is_impossible", (), "id")
    return SquadQuestion(qa["id"], qa["question"], context, answers, is_impossible)


def _answer(context: str, answer: dict, within: tuple) -> tuple:
    """(text, answer_start) of an answer that is where it says in the context."""
    for name in ("text", "answer_start"):
        if name not in answer:
            raise BadQuestion(f"missing field {name!r} in an answer", within)
    text, start = answer["text"], answer["answer_start"]
    if not isinstance(start, int) or isinstance(start, bool):
        raise BadQuestion(f"answer_start {start!r} is not a character offset", within, "answer_start")
    if context[start : start + len(text)] == text:
        return text, start
    if text not in context:
        raise BadQuestion(f"answer {text!r} does not occur in the context", within, "text")
    found = context[start : start + len(text)]
    raise BadQuestion(f"answer {text!r} is not at its answer_start {start} (the context has {found!r} there; "
                      f"the answer is at {context.index(text)})", within, "answer_start")  # fmt: skip


# --- Windows ---------------------------------------------------------------------------------------
def window_starts(n_pieces: int, window: int, stride: int) -> list:
    """First passage piece of each window: every ``stride`` pieces until one reaches the end (BERT)."""
    starts = [0]
    while starts[-1] + window < n_pieces:
        starts.append(starts[-1] + min(window, stride))
    return starts


def max_context(starts: list, window: int, n_pieces: int) -> list:
    """Per window, per piece: does this window give the piece the most context, min(left, right)
    + 0.01·window length (BERT's ``_check_is_max_context``; the first window wins ties)?"""
    best = {}
    for w, s in enumerate(starts):
        length = min(window, n_pieces - s)
        for p in range(s, s + length):
            score = min(p - s, s + length - 1 - p) + 0.01 * length
            if p not in best or score > best[p][1]:
                best[p] = (w, score)
    return [[best[p][0] == w for p in range(s, min(s + window, n_pieces))] for w, s in enumerate(starts)]


def answer_pieces(words: list, first_of: list, n_pieces: int, answer) -> tuple:
    """The first and last passage piece of an answer (text, char_start)."""
    text, start = answer
    end = start + len(text)
    first_word = next(i for i, (_, e) in enumerate(words) if e > start)
    last_word = max(i for i, (s, _) in enumerate(words) if s < end)
    last_piece = first_of[last_word + 1] - 1 if last_word + 1 < len(first_of) else n_pieces - 1
    return first_of[first_word], last_piece


def encode_question(q: SquadQuestion, encoder: SubwordEncoder, max_seq_length: int, stride: int,
                    max_query_length: int, passage=None) -> EncodedQuestion:  # fmt: skip
    """Windows of ``[CLS] question [SEP] passage-slice [SEP]``; the first answer is the target.
    ``passage``: (words, Subwords) of the context, when already encoded (questions share passages)."""
    d = encoder.dictionary
    query = encoder.encode(q.question)[:max_query_length]
    words, pieces = passage or _encode_passage(q.context, encoder)
    window = max_seq_length - len(query) - 3
    if window < 1:
        raise ValueError(f"--max-seq-length {max_seq_length} leaves no room for the passage")
    starts = window_starts(len(pieces.ids), window, stride)
    target = answer_pieces(words, pieces.first_of, len(pieces.ids), q.answers[0]) if not q.is_impossible else None
    encoded = EncodedQuestion(q, words, pieces.word_of)
    for start, context_flags in zip(starts, max_context(starts, window, len(pieces.ids))):
        prefix = [d.bos()] + query + [d.eos()]
        w = Window(prefix + pieces.ids[start : start + window] + [d.eos()], len(prefix), start, context_flags)
        if target and start <= target[0] and target[1] < start + len(context_flags):
            w.start, w.end = (t - start + len(prefix) for t in target)
        encoded.windows.append(w)
    return encoded


def _encode_passage(context: str, encoder: SubwordEncoder):
    words = word_spans(context)
    return words, encoder.encode_words([context[s:e] for s, e in words])


def encode_squad(questions: list, encoder: SubwordEncoder, max_seq_length=384, stride=128, max_query_length=64):
    passages = {}
    encoded = []
    for q in questions:
        if q.context not in passages:
            passages[q.context] = _encode_passage(q.context, encoder)
        encoded.append(encode_question(q, encoder, max_seq_length, stride, max_query_length, passages[q.context]))
    return encoded


class QuestionsDataset(FairseqDataset):
    """One item per question; a batch holds all windows of its questions (``src_tokens`` (W, T),
    ``start_positions``/``end_positions`` (W,)) and the questions themselves (``questions``), in order."""

    def __init__(self, questions: list, pad: int, shuffle: bool, seed: int):
        self.questions, self.pad, self.shuffle, self.seed = questions, pad, shuffle, seed
        self.sizes = np.array([max(len(w.tokens) for w in q.windows) for q in questions])

    def __getitem__(self, index):
        return {"id": index, "question": self.questions[index]}

    def __len__(self):
        return len(self.questions)

    def num_tokens(self, index):
        return sum(len(w.tokens) for w in self.questions[index].windows)

    def size(self, index):
        return self.sizes[index]

    def ordered_indices(self):
        if self.shuffle:
            return np.random.default_rng(self.seed).permutation(len(self))
        return np.arange(len(self))

    def collater(self, items):
        if not items:
            return {}
        windows = [w for item in items for w in item["question"].windows]
        tokens = [torch.tensor(w.tokens) for w in windows]
        return {
            "id": torch.tensor([item["id"] for item in items]),
            "nsentences": len(windows),
            "ntokens": sum(len(t) for t in tokens),
            "net_input": {"src_tokens": data_utils.collate_tokens(tokens, self.pad)},
            "start_positions": torch.tensor([w.start for w in windows]),
            "end_positions": torch.tensor([w.end for w in windows]),
            "questions": [item["question"] for item in items],
        }


# --- Decoding ------------------------------------------------------------------------------------
@dataclass
class Prediction:
    text: str  # best non-null span
    score: float  # its start + end logit
    null_score: float  # [CLS] start + end logit, the lowest over the windows (BERT)

    @property
    def null_odds(self) -> float:
        """> threshold: predict no answer (SQuAD v2.0)."""
        return self.null_score - self.score


def best_span(question: EncodedQuestion, start_logits: list, end_logits: list, max_answer_length: int) -> Prediction:
    """Best (start, end) over the windows: start ≤ end < start + max_answer_length passage pieces,
    both in the passage, the start piece in its window of most context. Logits: one (T,) tensor per window."""
    best, null_score = (float("-inf"), 0, 0), float("inf")
    for w, s, e in zip(question.windows, start_logits, end_logits):
        null_score = min(null_score, float(s[NO_ANSWER] + e[NO_ANSWER]))
        n = len(w.max_context)
        s_passage, e_passage = s[w.passage_offset : w.passage_offset + n], e[w.passage_offset : w.passage_offset + n]
        scores = s_passage[:, None].float() + e_passage[None, :].float()  # (start, end)
        allowed = torch.ones(n, n, dtype=torch.bool).triu().tril(max_answer_length - 1)
        allowed &= torch.tensor(w.max_context)[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
        flat = int(scores.argmax())
        if float(scores.view(-1)[flat]) > best[0]:
            best = (float(scores.view(-1)[flat]), w.first_piece + flat // n, w.first_piece + flat % n)
    score, first, last = best
    if score == float("-inf"):  # an empty passage
        return Prediction("", score, null_score)
    start_char, end_char = question.words[question.word_of[first]][0], question.words[question.word_of[last]][1]
    return Prediction(question.question.context[start_char:end_char], score, null_score)

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


def _line_of(raw: str, qid: str) -> int:
    position = raw.find(json.dumps(qid))
    return raw.count("\n", 0, position) + 1 if position >= 0 else 0


def read_squad(path, allow_no_answer: bool) -> list:
    """The questions of a SQuAD JSON file. Errors name the file and line: malformed JSON, missing
    fields, an answer whose text is not at its ``answer_start``, a question without an answer
    (unless ``allow_no_answer``: SQuAD v2.0, ``is_impossible``)."""
    raw = Path(path).read_text(encoding="utf-8")
    try:
        articles = json.loads(raw)["data"]
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
    except (KeyError, TypeError):
        raise ValueError(f"{path}: not SQuAD JSON (no top-level 'data' list)") from None
    questions = []
    for article in articles:
        for paragraph in article.get("paragraphs", []):
            for qa in paragraph.get("qas", []):
                try:
                    questions.append(_question(paragraph["context"], qa, allow_no_answer))
                except (KeyError, TypeError, ValueError) as e:
                    what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
                    raise ValueError(f"{path}:{_line_of(raw, qa.get('id', ''))}: question {qa.get('id')!r}: {what}") from None
    return questions


def _question(context: str, qa: dict, allow_no_answer: bool) -> SquadQuestion:
    answers = [(a["text"], int(a["answer_start"])) for a in qa.get("answers", [])]
    for text, start in answers:
        if context[start : start + len(text)] != text:
            found = context[start : start + len(text)]
            raise ValueError(f"answer {text!r} is not at its answer_start {start} (the context has {found!r} there)")
    is_impossible = bool(qa.get("is_impossible", False))
    if is_impossible and not allow_no_answer:
        raise ValueError("is_impossible (SQuAD v2.0): pass --version-2-with-negative")
    if not answers and not is_impossible:
        raise ValueError("no answers and not is_impossible")
    return SquadQuestion(qa["id"], qa["question"], context, answers, is_impossible)


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

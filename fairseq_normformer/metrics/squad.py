"""SQuAD's official metrics (evaluate-v2.0.py; on answerable questions the same as v1.1):
exact match and token F1 after normalising answers, the maximum over the gold answers, and the
no-answer threshold that maximises a score on dev (``find_best_thresh``)."""
import re
import string
from collections import Counter

PUNCTUATION = set(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(gold: str, prediction: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(prediction))


def token_f1(gold: str, prediction: str) -> float:
    gold_tokens, pred_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if not gold_tokens or not pred_tokens:  # no answer: 1 when both are empty
        return float(gold_tokens == pred_tokens)
    common = sum((Counter(gold_tokens) & Counter(pred_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_texts(answers: list) -> list:
    """The gold answers that normalise to something; [""] for an unanswerable question."""
    return [a for a in answers if normalize_answer(a)] or [""]


def question_scores(answers: list, prediction: str) -> tuple:
    """(EM, F1) of one prediction against its gold answer texts, each the maximum over them."""
    golds = gold_texts(answers)
    return max(exact_match(g, prediction) for g in golds), max(token_f1(g, prediction) for g in golds)


def evaluate(gold: dict, predictions: dict) -> dict:
    """gold: {qid: [answer texts]} ([] when unanswerable); predictions: {qid: text} ("" = no answer).
    Returns exact and f1 in percent, over all questions of ``gold`` (a missing prediction counts as "")."""
    scores = [question_scores(answers, predictions.get(qid, "")) for qid, answers in gold.items()]
    return {"exact": 100 * sum(s[0] for s in scores) / len(scores), "f1": 100 * sum(s[1] for s in scores) / len(scores),
            "total": len(scores)}  # fmt: skip


def best_threshold(gold: dict, answered: dict, null_odds: dict, metric=token_f1) -> tuple:
    """The no-answer threshold (predict "" where null_odds > threshold) that maximises ``metric``
    given each question's best non-null answer ``answered[qid]``: the official find_best_thresh.
    Returns (score in percent, threshold)."""
    has_answer = {qid: any(normalize_answer(a) for a in answers) for qid, answers in gold.items()}
    score = best = sum(not h for h in has_answer.values())  # everything predicted unanswerable
    threshold = 0.0
    for qid in sorted(gold, key=lambda q: null_odds[q]):
        if has_answer[qid]:
            score += max(metric(g, answered[qid]) for g in gold_texts(gold[qid]))
        elif answered[qid]:
            score -= 1
        if score > best:
            best, threshold = score, null_odds[qid]
    return 100 * best / len(gold), threshold


def apply_threshold(answered: dict, null_odds: dict, threshold: float) -> dict:
    return {qid: "" if null_odds[qid] > threshold else text for qid, text in answered.items()}

"""Our SQuAD EM/F1 and no-answer threshold against an independent re-implementation of the
official evaluate-v2.0.py logic, written here from the script, on tricky answers."""
import collections
import re
import string

import pytest

from fairseq_normformer.metrics import squad


# --- the official script's logic (evaluate-v2.0.py), kept as written there ---------------------
def official_normalize(s):
    def remove_articles(text):
        return re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_tokens(s):
    return official_normalize(s).split() if s else []


def official_f1(a_gold, a_pred):
    gold_toks, pred_toks = official_tokens(a_gold), official_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision, recall = num_same / len(pred_toks), num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def official_raw_scores(gold, preds):
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        golds = [a for a in answers if official_normalize(a)] or [""]
        exact[qid] = max(int(official_normalize(a) == official_normalize(preds[qid])) for a in golds)
        f1[qid] = max(official_f1(a, preds[qid]) for a in golds)
    return exact, f1


def official_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = best_score = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score, best_thresh = cur_score, na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


# --- tricky cases -------------------------------------------------------------------------------
GOLD = {
    "articles": ["The Eiffel Tower", "an Eiffel tower"],
    "article_inside_words": ["theatre and anthem"],
    "punctuation": ["U.S.A."],
    "unicode": ["Zürich's café"],
    "partial": ["in the late 1990s"],
    "only_punctuation_gold": ["...", "Paris"],
    "unanswerable": [],
    "unanswerable_2": [],
    "repeated_tokens": ["the cat the cat sat"],
}
PREDICTIONS = {
    "articles": "eiffel tower",
    "article_inside_words": "theatre anthem",
    "punctuation": "USA",
    "unicode": "zurichs cafe",
    "partial": "late 1990s and",
    "only_punctuation_gold": "paris!",
    "unanswerable": "",
    "unanswerable_2": "something",
    "repeated_tokens": "cat cat cat",
}


def test_exact_match_and_f1_agree_with_the_official_logic():
    exact, f1 = official_raw_scores(GOLD, PREDICTIONS)
    ours = squad.evaluate(GOLD, PREDICTIONS)
    assert ours["exact"] == pytest.approx(100 * sum(exact.values()) / len(GOLD))
    assert ours["f1"] == pytest.approx(100 * sum(f1.values()) / len(GOLD))
    for qid in GOLD:
        assert squad.question_scores(GOLD[qid], PREDICTIONS[qid]) == pytest.approx((exact[qid], f1[qid])), qid
    # spot checks of the rules themselves
    assert exact["articles"] == 1 and exact["punctuation"] == 1 and exact["unicode"] == 0
    assert exact["only_punctuation_gold"] == 1 and exact["unanswerable"] == 1 and exact["unanswerable_2"] == 0


def test_best_threshold_agrees_with_the_official_find_best_thresh():
    null_odds = {qid: (i * 7 % 5) - 2.0 + 0.1 * i for i, qid in enumerate(GOLD)}
    _, f1 = official_raw_scores(GOLD, PREDICTIONS)
    has_answer = {qid: bool(answers) for qid, answers in GOLD.items()}
    expected = official_best_thresh(PREDICTIONS, f1, null_odds, has_answer)
    assert squad.best_threshold(GOLD, PREDICTIONS, null_odds) == pytest.approx(expected)
    thresholded = squad.apply_threshold(PREDICTIONS, null_odds, expected[1])
    assert squad.evaluate(GOLD, thresholded)["f1"] == pytest.approx(expected[0])

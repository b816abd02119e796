"""Entity-level P/R/F1 against seqeval (conlleval-compatible default mode) on random tag sequences
in IOB1, BIO and IOBES, and a hand-counted IOB1 case."""
import random

import pytest

from fairseq_normformer.metrics.conll import chunks, evaluate

seqeval_metrics = pytest.importorskip("seqeval.metrics")  # requirements/test.txt

SCHEMES = {
    "IOB1": ["O", "I-PER", "I-LOC", "B-PER", "B-LOC"],
    "BIO": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"],
    "IOBES": ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "E-LOC", "S-LOC"],
}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_precision_recall_f1_agree_with_seqeval(scheme):
    rng = random.Random(scheme)
    for _ in range(100):
        gold = [[rng.choice(SCHEMES[scheme]) for _ in range(rng.randint(1, 9))] for _ in range(6)]
        predicted = [[rng.choice(SCHEMES[scheme]) if rng.random() < 0.5 else t for t in s] for s in gold]
        ours = evaluate(gold, predicted)
        assert ours["precision"] == pytest.approx(100 * seqeval_metrics.precision_score(gold, predicted))
        assert ours["recall"] == pytest.approx(100 * seqeval_metrics.recall_score(gold, predicted))
        assert ours["f1"] == pytest.approx(100 * seqeval_metrics.f1_score(gold, predicted))


def test_iob1_chunks_by_hand():
    # I- after O starts a chunk; B- separates two adjacent chunks of one type; a type change ends one
    tags = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-PER", "I-PER"]
    assert chunks(tags) == {("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4), ("PER", 5, 6)}
    result = evaluate([tags], [["I-PER", "I-PER", "I-PER", "O", "I-LOC", "O", "O"]])
    # predicted: PER 0-2 (wrong end), LOC 4-4 (right): P = 1/2, R = 1/4
    assert result["precision"] == pytest.approx(50) and result["recall"] == pytest.approx(25)
    assert result["f1"] == pytest.approx(2 * 50 * 25 / 75)

"""Span classification (J&M §11.5.2): span enumeration, the span representation against an
explicit loop over spans and tokens, decoding (best non-overlapping vs all, nested), the batches'
span positions and labels, and the span metric against seqeval on the spans' BIO tags."""
import random

import pytest
import torch
from fairseq.data import Dictionary

from fairseq_normformer.data.conll import TaggedSentence, encode_sentence
from fairseq_normformer.data.spans import NULL, SpanDataset, decode_spans, enumerate_spans, last_pieces, spans_to_tags
from fairseq_normformer.data.subwords import SubwordEncoder
from fairseq_normformer.metrics.conll import chunks, evaluate_entities
from fairseq_normformer.models.token_heads import SpanClassificationHead


@pytest.mark.parametrize("n_words, max_length", [(0, 3), (1, 3), (5, 1), (5, 3), (4, 9)])
def test_enumerate_spans_is_every_span_up_to_max_length_once(n_words, max_length):
    expected = []
    for i in range(n_words):
        for j in range(n_words):
            if i <= j and j - i + 1 <= max_length:
                expected.append((i, j))
    assert enumerate_spans(n_words, max_length) == expected


@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_span_representation_matches_an_explicit_loop(pooling):
    torch.manual_seed(0)
    head = SpanClassificationHead(8, 5, dropout=0.1, pooling=pooling).eval()
    features = torch.randn(2, 7, 8)
    spans = torch.tensor([[[1, 1], [1, 4], [2, 6]], [[0, 2], [3, 3], [0, 0]]])
    logits = head(features, spans)
    assert logits.shape == (2, 3, 5)
    for b in range(2):
        for s in range(3):
            i, j = spans[b, s].tolist()
            inside = features[b, i : j + 1]
            if pooling == "mean":
                pooled = sum(inside[k] for k in range(j - i + 1)) / (j - i + 1)
            else:
                scores = [float(head.attention(inside[k])) for k in range(j - i + 1)]
                weights = torch.tensor(scores).exp() / torch.tensor(scores).exp().sum()
                pooled = sum(weights[k] * inside[k] for k in range(j - i + 1))
            g = torch.cat([head.start_ffn(features[b, i]), head.end_ffn(features[b, j]), pooled])
            torch.testing.assert_close(logits[b, s], head.classifier(g), atol=1e-5, rtol=0)


def test_decoding_keeps_the_best_non_overlapping_spans_or_all():
    labels = [NULL, "FUNC", "MOD"]
    spans = [(0, 0), (0, 2), (1, 1), (3, 3), (2, 3)]
    logits = torch.tensor([[0.0, 3.0, 0.0],   # FUNC 0-0, less probable than MOD 0-2 which covers it
                           [0.0, 0.0, 5.0],   # MOD 0-2
                           [0.0, 4.0, 0.0],   # FUNC 1-1, nested in MOD 0-2
                           [9.0, 0.0, 0.0],   # NULL
                           [0.0, 2.0, 0.0]])  # FUNC 2-3 overlaps MOD 0-2  # fmt: skip
    assert decode_spans(logits, spans, labels, keep_all=False) == {("MOD", 0, 2)}
    assert decode_spans(logits, spans, labels, keep_all=True) == {
        ("FUNC", 0, 0), ("MOD", 0, 2), ("FUNC", 1, 1), ("FUNC", 2, 3)}  # fmt: skip
    assert spans_to_tags({("MOD", 0, 2)}, 5) == ["B-MOD", "I-MOD", "I-MOD", "O", "O"]


def test_span_metric_equals_seqeval_on_bio_tags_without_nesting():
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    rng = random.Random(0)

    def random_spans(n):
        out, i = set(), 0
        while i < n:
            length = rng.randint(1, 3)
            if rng.random() < 0.4 and i + length <= n:
                out.add((rng.choice(["PER", "LOC"]), i, i + length - 1))
            i += length
        return out

    for _ in range(50):
        lengths = [rng.randint(1, 10) for _ in range(5)]
        gold = [random_spans(n) for n in lengths]
        predicted = [random_spans(n) if rng.random() < 0.5 else set(g) for g, n in zip(gold, lengths)]
        gold_tags = [spans_to_tags(s, n) for s, n in zip(gold, lengths)]
        predicted_tags = [spans_to_tags(s, n) for s, n in zip(predicted, lengths)]
        assert [chunks(t) for t in gold_tags] == gold  # the tags represent the spans exactly
        ours = evaluate_entities(gold, predicted)
        assert ours["precision"] == pytest.approx(100 * seqeval_metrics.precision_score(gold_tags, predicted_tags))
        assert ours["recall"] == pytest.approx(100 * seqeval_metrics.recall_score(gold_tags, predicted_tags))
        assert ours["f1"] == pytest.approx(100 * seqeval_metrics.f1_score(gold_tags, predicted_tags))


def test_batches_hold_each_span_first_and_last_piece_and_its_label(tiny_bert_corpus):
    encoder = SubwordEncoder(tiny_bert_corpus.spm_model, Dictionary.load(str(tiny_bert_corpus.data_bin / "dict.txt")))
    sentence = TaggedSentence("see os.path.join and collections".split(), ["O", "B-FUNC", "O", "B-MOD"], 1)
    tag_ids = {"O": 0, "B-FUNC": 1, "B-MOD": 2}
    encoded = encode_sentence(sentence, encoder, tag_ids, max_seq_length=64)
    label_ids = {NULL: 0, "FUNC": 1, "MOD": 2}
    batch = SpanDataset([encoded], encoder.dictionary.pad(), False, 0, label_ids, max_span_length=2).collater(
        [{"id": 0, "sentence": encoded}])  # fmt: skip
    assert batch["span_words"] == [[(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (2, 3), (3, 3)]]
    last = last_pieces(encoded)
    assert last[-1] == len(encoded.tokens) - 2 and last[1] - encoded.first_pieces[1] >= 1  # os.path.join: pieces
    for (i, j), (first, end), label in zip(batch["span_words"][0], batch["spans"][0].tolist(), batch["span_target"][0]):
        assert (first, end) == (encoded.first_pieces[i], last[j])
        assert int(label) == {(1, 1): 1, (3, 3): 2}.get((i, j), 0)

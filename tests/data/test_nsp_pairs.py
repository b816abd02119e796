"""Sentence pairs for NSP: label balance, each negative strategy's definition, sizes, determinism
and bad input. Examples are decoded back to their source with a corpus whose every token is unique."""
import logging
import math

import numpy as np
import pytest

from fairseq_normformer.data.nsp_pairs import ContiguousTextDataset, NspPairDataset, find_documents
from fairseq_normformer.data.nsp_pairs import IS_NEXT, NOT_NEXT

from .nsp_corpora import PlacedCorpus, split_pair

EPOCHS = range(1, 6)


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(1)
    return PlacedCorpus(sentence_counts=rng.integers(2, 12, size=40), sentence_lengths=(1, 6))


def pairs_dataset(corpus, negatives, tokens_per_sample=40, short_seq_prob=0.1, seed=3):
    return NspPairDataset(corpus.sentences, corpus.dictionary, tokens_per_sample, negatives, short_seq_prob, seed)


def all_examples(dataset):
    for epoch in EPOCHS:
        dataset.set_epoch(epoch)
        for i in range(len(dataset)):
            item = dataset[i]
            yield i, item["tokens"], item["nsp_label"]


def located_pairs(corpus, dataset):
    for i, tokens, label in all_examples(dataset):
        a, b = split_pair(tokens, corpus.dictionary)
        yield i, label, corpus.locate(a), corpus.locate(b)


@pytest.mark.parametrize("negatives", ["random", "same-document", "swap"])
def test_half_of_the_pairs_are_continuations(corpus, negatives):
    labels = np.array([label for _, _, label in all_examples(pairs_dataset(corpus, negatives))])
    assert set(labels) == {IS_NEXT, NOT_NEXT}
    bound = 4 * math.sqrt(0.25 / len(labels))  # 4 standard deviations of a fair coin's mean
    assert abs(np.mean(labels == IS_NEXT) - 0.5) < bound, len(labels)


def assert_continuation(corpus, first, second):
    """``second`` starts exactly where ``first`` ends, at a sentence boundary of the same document."""
    assert first is not None and second is not None
    assert first[0] == second[0] and second[1] == first[2] + 1
    assert second[1] in corpus.sentence_starts[second[0]]


@pytest.mark.parametrize("negatives", ["random", "same-document", "swap"])
def test_positives_are_true_continuations(corpus, negatives):
    for _, label, a, b in located_pairs(corpus, pairs_dataset(corpus, negatives)):
        if label == IS_NEXT:
            assert_continuation(corpus, a, b)


def test_swap_negatives_are_exactly_reversed_consecutive_pairs(corpus):
    n_negatives = 0
    for _, label, a, b in located_pairs(corpus, pairs_dataset(corpus, "swap")):
        if label == NOT_NEXT:
            assert_continuation(corpus, b, a)  # B, then A, is the document's order
            n_negatives += 1
    assert n_negatives > 100


def test_random_negatives_come_from_another_document(corpus):
    n_negatives = 0
    for _, label, a, b in located_pairs(corpus, pairs_dataset(corpus, "random")):
        if label == NOT_NEXT:
            assert a is not None and b is not None and a[0] != b[0]
            assert b[1] in corpus.sentence_starts[b[0]]  # B starts at a sentence
            n_negatives += 1
    assert n_negatives > 100


def test_same_document_negatives_neither_overlap_nor_touch_a(corpus):
    same, fallback = 0, 0
    for _, label, a, b in located_pairs(corpus, pairs_dataset(corpus, "same-document")):
        if label != NOT_NEXT:
            continue
        doc = a[0]
        a_first, a_last = corpus.sentence_of(doc, a[1]), corpus.sentence_of(doc, a[2])
        if b[0] == doc:
            b_first, b_last = corpus.sentence_of(doc, b[1]), corpus.sentence_of(doc, b[2])
            assert b_last <= a_first - 2 or b_first >= a_last + 2, (a, b)  # a whole sentence in between
            same += 1
        else:  # only when no sentence after A's successor exists (A's start may have been trimmed)
            assert a_last + 2 >= len(corpus.sentence_starts[doc])
            fallback += 1
    assert same > 2 * fallback > 0


def test_sizes_bound_every_example_and_equal_continuations(corpus):
    dataset = pairs_dataset(corpus, "random", tokens_per_sample=24)
    assert dataset.sizes.max() <= 24
    for i, tokens, label in all_examples(dataset):
        assert len(tokens) <= dataset.size(i)
        if label == IS_NEXT:
            assert len(tokens) == dataset.size(i)


def test_examples_depend_only_on_seed_epoch_and_index(corpus):
    first = pairs_dataset(corpus, "same-document")
    second = pairs_dataset(corpus, "same-document")
    order = np.random.default_rng(0).permutation(len(first))  # another access order, as workers have
    for epoch in (1, 2):
        first.set_epoch(epoch)
        second.set_epoch(epoch)
        in_order = [first[i]["tokens"].tolist() for i in range(len(first))]
        shuffled = {int(i): second[int(i)]["tokens"].tolist() for i in order}
        assert in_order == [shuffled[i] for i in range(len(first))]
    first.set_epoch(1)
    epoch_1 = [first[i]["tokens"].tolist() for i in range(len(first))]
    assert epoch_1 != in_order  # epoch 2 draws new pairs
    other_seed = pairs_dataset(corpus, "same-document", seed=4)
    assert [other_seed[i]["tokens"].tolist() for i in range(len(other_seed))] != epoch_1


def test_single_sentence_and_empty_documents_are_skipped_and_counted(caplog):
    corpus = PlacedCorpus(sentence_counts=[3, 1, 4, 1, 1, 2], separators=2)  # 2 empty lines: empty documents
    documents, single = find_documents(corpus.sentences.sizes)
    assert single == 3
    assert [len(d) for d in documents] == [3, 4, 2]
    with caplog.at_level(logging.INFO):
        dataset = pairs_dataset(corpus, "random")
    assert "skipped 3 single-sentence documents" in caplog.text
    for _, tokens, _ in all_examples(dataset):  # every example builds
        a, b = split_pair(tokens, corpus.dictionary)
        assert len(a) >= 1 and len(b) >= 1


def test_tokens_per_sample_too_small_for_a_pair_is_an_error(corpus):
    with pytest.raises(ValueError, match=r"--tokens-per-sample=4 is too small for \[CLS\] A \[SEP\] B \[SEP\]"):
        pairs_dataset(corpus, "random", tokens_per_sample=4)
    pairs_dataset(corpus, "random", tokens_per_sample=5)


def test_cross_document_negatives_need_two_documents():
    corpus = PlacedCorpus(sentence_counts=[5, 1])
    with pytest.raises(ValueError, match="needs at least 2 documents"):
        pairs_dataset(corpus, "random")
    assert len(pairs_dataset(corpus, "swap")) >= 1


def test_no_nsp_examples_are_contiguous_text_of_one_document(corpus):
    """--no-nsp: [CLS] text [SEP], the chunk's text cut to tokens_per_sample - 2, one document."""
    dataset = ContiguousTextDataset(corpus.sentences, corpus.dictionary, 40, "random", 0.1, seed=3)
    d = corpus.dictionary
    plan = NspPairDataset(corpus.sentences, d, 41, "random", 0.1, seed=3)  # the same chunks, pairs one token longer
    assert np.array_equal(dataset.chunks, plan.chunks) and (dataset.sizes <= 40).all()
    for i in range(len(dataset)):
        item = dataset[i]
        tokens = item["tokens"].tolist()
        assert "nsp_label" not in item and len(tokens) == dataset.sizes[i]
        assert tokens[0] == d.bos() and tokens[-1] == d.eos() and d.eos() not in tokens[1:-1]
        doc, first, _ = corpus.locate(tokens[1:-1])
        start_sentence = dataset.chunks[i][1]
        assert doc == dataset.chunks[i][0] and first == corpus.sentence_starts[doc][start_sentence]

"""BERT masking statistics (15%; 80/10/10), special symbols, whole words, SpanBERT spans, determinism.

Tolerances: counts over N trials are checked to within 5 standard deviations of a binomial,
5·sqrt(p(1-p)/N) (a false alarm about once in 3 million runs)."""
import math

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

from fairseq_normformer.data.masking import (
    MaskedPairDataset,
    Masker,
    MaskingConfig,
    span_length_distribution,
    split_words,
    word_start_symbols,
)
from fairseq_normformer.data.nsp_pairs import NspPairDataset

from .nsp_corpora import PlacedCorpus


def tolerance(p, n):
    return 5 * math.sqrt(p * (1 - p) / n)


def vocabulary(n_words=1000, pieces_per_word=0):
    """A dictionary of '▁w' word starts, each followed by ``pieces_per_word`` continuation pieces."""
    d = Dictionary()
    for i in range(n_words):
        d.add_symbol(f"\u2581w{i}")
        for j in range(pieces_per_word):
            d.add_symbol(f"w{i}p{j}")
    d.add_symbol("<mask>")
    return d


def pair_sequences(d, n_seqs, length, rng, word_starts_only=True):
    """[CLS] x... [SEP] y... [SEP] rows of ordinary symbols and their maskable flags."""
    ordinary = np.array([i for i in range(d.nspecial, len(d) - 1) if not word_starts_only or d[i].startswith("\u2581")])
    for _ in range(n_seqs):
        tokens = rng.choice(ordinary, size=length)
        tokens[0], tokens[length // 2], tokens[-1] = d.bos(), d.eos(), d.eos()
        yield tokens, ~np.isin(tokens, [d.bos(), d.eos(), d.pad()])


def categories(d, tokens, source, target):
    """Counts of targets, and of targets shown as [MASK], as a random other token, or unchanged."""
    is_target = target != d.pad()
    mask = is_target & (source == d.index("<mask>"))
    kept = is_target & (source == tokens)
    return is_target.sum(), mask.sum(), (is_target & ~mask & ~kept).sum(), kept.sum()


def test_token_masking_statistics_match_bert():
    d, rng = vocabulary(), np.random.default_rng(0)
    masker = Masker(MaskingConfig(), d, d.index("<mask>"))
    totals, maskable = np.zeros(4, dtype=np.int64), 0
    for tokens, can_mask in pair_sequences(d, 400, 203, rng):
        source, target = masker(tokens, can_mask, rng)
        totals += categories(d, tokens, source, target)
        maskable += can_mask.sum()
        assert (source[~can_mask] == tokens[~can_mask]).all() and (target[~can_mask] == d.pad()).all()
    n_targets, n_mask, n_random, n_kept = totals
    assert abs(n_targets / maskable - 0.15) < tolerance(0.15, maskable)
    assert abs(n_mask / n_targets - 0.8) < tolerance(0.8, n_targets)
    # a random replacement equal to the original (1 in 1000) counts as kept
    assert abs(n_random / n_targets - 0.1) < tolerance(0.1, n_targets)
    assert abs(n_kept / n_targets - 0.1) < tolerance(0.1, n_targets)


def test_random_replacements_are_ordinary_symbols():
    d, rng = vocabulary(n_words=20), np.random.default_rng(1)
    d.finalize(padding_factor=16)  # adds madeupword fillers, which must never be drawn
    mask_idx = d.add_symbol("<mask>")
    masker = Masker(MaskingConfig(random_token_prob=1.0, leave_unmasked_prob=0.0), d, mask_idx)
    for tokens, can_mask in pair_sequences(d, 50, 60, rng):
        source, target = masker(tokens, can_mask, rng)
        replaced = source[target != d.pad()]
        assert all(i >= d.nspecial and i != mask_idx and not d[i].startswith("madeupword") for i in replaced)


def words_of(d, tokens, can_mask):
    return split_words(tokens, np.flatnonzero(can_mask), word_start_symbols(d))


def test_whole_word_masking_masks_and_corrupts_whole_words():
    d, rng = vocabulary(n_words=300, pieces_per_word=2), np.random.default_rng(2)
    masker = Masker(MaskingConfig(whole_words=True), d, d.index("<mask>"))
    n_targets = maskable = 0
    for tokens, can_mask in pair_sequences(d, 200, 150, rng, word_starts_only=False):
        source, target = masker(tokens, can_mask, rng)
        for word in words_of(d, tokens, can_mask):
            is_target, is_mask = target[word] != d.pad(), source[word] == d.index("<mask>")
            assert is_target.all() or not is_target.any()
            assert is_mask.all() or not is_mask.any()  # one 80/10/10 decision per word
        n_targets += (target != d.pad()).sum()
        maskable += can_mask.sum()
    # words are taken only while they fit the 15% budget, so the rate can only fall a little short
    assert 0.13 < n_targets / maskable <= 0.15 + tolerance(0.15, maskable)


def test_span_lengths_follow_spanbert_clipped_geometric():
    probs = span_length_distribution(0.2, 10)
    expected = np.array([0.2 * 0.8 ** (k - 1) for k in range(1, 11)])
    np.testing.assert_allclose(probs, expected / expected.sum())
    assert abs((np.arange(1, 11) * probs).sum() - 3.8) < 0.01  # SpanBERT: mean span length 3.8 words


def test_span_masking_masks_runs_of_whole_words_with_spanbert_lengths():
    d, rng = vocabulary(n_words=300, pieces_per_word=1), np.random.default_rng(3)
    # a low rate over long rows makes touching (merged) spans rare, so lengths are as sampled
    masker = Masker(MaskingConfig(spans=True, mask_prob=0.02), d, d.index("<mask>"))
    span_words = []
    for tokens, can_mask in pair_sequences(d, 40, 4000, rng, word_starts_only=False):
        words = words_of(d, tokens, can_mask)
        word_of = {int(p): i for i, w in enumerate(words) for p in w}
        starts, ends = {int(w[0]) for w in words}, {int(w[-1]) for w in words}
        units = masker.choose_units(tokens, np.flatnonzero(can_mask), 80, rng)
        assert sum(len(u) for u in units) == 80
        assert all(int(unit[0]) in starts for unit in units)  # spans start at word starts
        # whole words, but for the one span stopped at the budget (one budget for A and B)
        assert sum(int(unit[-1]) not in ends for unit in units) <= 1
        span_words += [word_of[int(unit[-1])] - word_of[int(unit[0])] + 1 for unit in units]
    mean = np.mean(span_words)
    assert 1 <= min(span_words) and np.mean(np.array(span_words) > 10) < 0.02  # > 10: touching spans merged
    assert abs(mean - 3.8) < 5 * np.std(span_words) / math.sqrt(len(span_words)) + 0.1


def test_span_masking_corrupts_each_span_as_one_unit():
    d, rng = vocabulary(n_words=300, pieces_per_word=1), np.random.default_rng(4)
    masker = Masker(MaskingConfig(spans=True), d, d.index("<mask>"))
    decisions = []
    for tokens, can_mask in pair_sequences(d, 300, 120, rng, word_starts_only=False):
        units = masker.choose_units(tokens, np.flatnonzero(can_mask), 18, rng)
        for unit in units:
            source = tokens.copy()
            masker.corrupt(source, unit, rng)
            is_mask = source[unit] == d.index("<mask>")
            assert is_mask.all() or not is_mask.any()
            decisions.append(is_mask.all())
    assert abs(np.mean(decisions) - 0.8) < tolerance(0.8, len(decisions))


def test_whole_word_masking_needs_sentencepiece_word_starts():
    d = Dictionary()
    for i in range(10):
        d.add_symbol(f"w{i}")
    with pytest.raises(ValueError, match="SentencePiece"):
        Masker(MaskingConfig(whole_words=True), d, d.add_symbol("<mask>"))


def test_masked_examples_depend_only_on_seed_epoch_and_index():
    corpus = PlacedCorpus(sentence_counts=[4, 6, 3, 5, 7, 2], sentence_lengths=(3, 8))

    def dataset(seed=1):
        pairs = NspPairDataset(corpus.sentences, corpus.dictionary, 32, "random", seed=seed)
        masker = Masker(MaskingConfig(), corpus.dictionary, corpus.dictionary.index("<mask>"))
        return MaskedPairDataset(pairs, masker, corpus.dictionary, seed=seed)

    def items(ds, epoch, reverse=False):
        ds.set_epoch(epoch)
        order = range(len(ds) - 1, -1, -1) if reverse else range(len(ds))  # workers see other orders
        got = {i: ds[i] for i in order}
        return [(got[i]["source"].tolist(), got[i]["target"].tolist(), got[i]["nsp_label"]) for i in range(len(ds))]

    first, second = dataset(), dataset()
    assert items(first, 2) == items(second, 2, reverse=True)
    assert items(first, 1) != items(first, 2)
    assert items(dataset(seed=2), 1) != items(first, 1)


def test_collated_batches_pad_sources_and_targets():
    corpus = PlacedCorpus(sentence_counts=[4, 6, 3, 5], sentence_lengths=(3, 8))
    d = corpus.dictionary
    pairs = NspPairDataset(corpus.sentences, d, 32, "swap", seed=1)
    ds = MaskedPairDataset(pairs, Masker(MaskingConfig(), d, d.index("<mask>")), d, seed=1)
    samples = [ds[i] for i in range(len(ds))]
    batch = ds.collater(samples)
    lengths = [len(s["source"]) for s in samples]
    assert batch["net_input"]["src_tokens"].shape == batch["target"].shape == (len(samples), max(lengths))
    assert batch["net_input"]["src_lengths"].tolist() == lengths
    assert batch["ntokens"] == sum(lengths) and batch["nsentences"] == len(samples)
    assert torch.equal(batch["nsp_target"], torch.tensor([s["nsp_label"] for s in samples]))
    for row, n in zip(batch["net_input"]["src_tokens"], lengths):
        assert (row[n:] == d.pad()).all() and (row[:n] != d.pad()).all()
    assert sorted(ds.ordered_indices().tolist()) == list(range(len(ds)))

"""Exact span masking through the real mlm_nsp dataset on the standard-library corpus, against an
independent re-implementation of SpanBERT's algorithm (its masking.py: PairWithSpanMaskingScheme.mask
and span_masking's merge_intervals), at 64, 128 and 512 tokens: the budget is met exactly and
never exceeded, spans stay inside their segment, and the span lengths follow SpanBERT's."""
import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from fairseq_normformer.tasks.mlm_nsp import MlmNspConfig, MlmNspTask

MASK_PROB = 0.15
EPOCHS = {64: 1, 128: 1, 512: 2}  # over 1000 spans at every length for the histogram comparison


def spanbert_spans(is_word_start, budget, rng, p=0.2, max_words=10):
    """SpanBERT's loop as published, on one segment: spans (first, last) merged when they touch."""
    n, lengths = len(is_word_start), np.arange(1, max_words + 1)
    len_distrib = p * (1 - p) ** (lengths - 1)
    len_distrib /= len_distrib.sum()

    def word_start(i):
        while i > 0 and not is_word_start[i]:
            i -= 1
        return i

    def word_end(i):  # exclusive
        i += 1
        while i < n and not is_word_start[i]:
            i += 1
        return i

    mask, spans = set(), []
    while len(mask) < budget:
        span_len = rng.choice(lengths, p=len_distrib)
        anchor = int(rng.integers(n))
        if anchor in mask:
            continue
        left, right = word_start(anchor), word_end(anchor)
        spans.append([left, left])
        num_words = 0
        while True:
            for i in range(left, right):
                if len(mask) >= budget:
                    break
                mask.add(i)
                spans[-1][-1] = i
            num_words += 1
            if num_words >= span_len or right >= n or len(mask) >= budget:
                break
            left, right = right, word_end(right)
    merged = []
    for first, last in sorted(spans):
        if merged and merged[-1][1] + 1 >= first:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return merged


def runs(selected):
    """(first, last) of the maximal runs of True."""
    edges = np.flatnonzero(np.diff(selected.astype(np.int8), prepend=0, append=0))
    return [(a, b - 1) for a, b in zip(edges[::2], edges[1::2])]


def words_in(first, last, word_index):
    return word_index[last] - word_index[first] + 1


def span_statistics(task, tokens_per_sample):
    """Per sequence (maskable, selected) and per segment the word lengths of our spans and of
    SpanBERT's on the same segment with the same number of tokens to select."""
    dataset, d = task.dataset("train"), task.source_dictionary
    counts, ours, reference = [], [], []
    rng = np.random.default_rng(tokens_per_sample)
    word_start_symbols = task.masker.word_starts
    for epoch in range(1, EPOCHS[tokens_per_sample] + 1):
        dataset.set_epoch(epoch)
        for index in range(len(dataset)):
            item = dataset[index]
            target = item["target"].numpy() != d.pad()
            tokens = np.where(target, item["target"].numpy(), item["source"].numpy())
            separators = np.flatnonzero(tokens == d.eos())
            assert len(separators) == 2 and not target[0] and not target[separators].any()
            counts.append((len(tokens) - 3, target.sum()))
            units = task.masker.choose_units(tokens, np.flatnonzero(tokens > d.nspecial - 1), target.sum(), rng)
            assert all((u < separators[0]).all() or (u > separators[0]).all() for u in units)  # no unit crosses [SEP]
            for first, stop in ((1, separators[0]), (separators[0] + 1, separators[1])):  # A, B
                is_word_start = word_start_symbols[tokens[first:stop]]
                word_index = np.cumsum(is_word_start) - 1
                selected = target[first:stop]
                ours += [words_in(a, b, word_index) for a, b in runs(selected)]
                reference += [words_in(a, b, word_index) for a, b in spanbert_spans(is_word_start, selected.sum(), rng)]
    return np.array(counts), np.array(ours), np.array(reference)


@pytest.fixture(scope="module", params=[64, 128, 512])
def statistics(request, tiny_bert_corpus):
    cfg = MlmNspConfig(data=str(tiny_bert_corpus.data_bin), tokens_per_sample=request.param, seed=1, span_masking=True)
    task = MlmNspTask.setup_task(OmegaConf.structured(cfg))
    task.load_dataset("train")
    return span_statistics(task, request.param)


def test_selected_tokens_are_15_percent_and_never_exceed_the_budget(statistics):
    counts, _, _ = statistics
    maskable, selected = counts[:, 0], counts[:, 1]
    assert abs(selected.sum() / maskable.sum() - MASK_PROB) < 0.005
    ceiling = np.maximum(1, np.ceil(MASK_PROB * maskable - 1e-9))
    assert (selected <= ceiling).all() and (selected >= np.floor(MASK_PROB * maskable + 1e-9)).all()


def test_span_lengths_match_spanbert(statistics):
    """Histograms of span lengths in words (after truncation at the budget and merging of touching
    spans, as SpanBERT's): each bin within 5 standard deviations of the two-sample difference."""
    _, ours, reference = statistics
    assert ours.sum() > 0 and len(ours) > 1000
    for length in range(1, 12):  # 11: 11 words or more
        p_ours, p_ref = np.mean(np.minimum(ours, 11) == length), np.mean(np.minimum(reference, 11) == length)
        p = (p_ours * len(ours) + p_ref * len(reference)) / (len(ours) + len(reference))
        sigma = math.sqrt(p * (1 - p) * (1 / len(ours) + 1 / len(reference)))
        assert abs(p_ours - p_ref) <= 5 * sigma + 1e-9, f"{length} words: {p_ours:.4f} vs SpanBERT {p_ref:.4f}"

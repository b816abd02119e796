"""Span masking through the real mlm_nsp dataset on the standard-library corpus, at 64, 128 and 512
tokens, against a re-implementation of SpanBERT's algorithm (Joshi et al. 2020, §3.1, and its
masking.py: PairWithSpanMaskingScheme.mask, merge_intervals) run on the same sequences with the
same budgets: the budget is met within one token of 15%, no span crosses [SEP], and a chi-square
test does not tell the two span-length distributions apart."""
import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.stats import chi2_contingency

from fairseq_normformer.tasks.mlm_nsp import MlmNspConfig, MlmNspTask

MASK_PROB = 0.15
EPOCHS = {64: 1, 128: 1, 512: 2}  # about 1000 spans or more at every length
LONGEST_BIN = 8  # span lengths of 8 words or more share a bin (enough expected counts for chi-square)


def spanbert_spans(is_word_start, budget, rng, segment_ends=(), p=0.2, max_words=10):
    """SpanBERT's loop on one sequence, one budget: draw ℓ ~ Geometric(p) clipped at ``max_words``
    and an anchor; if the anchor is free, add ℓ whole words from its word's start, stopping at the
    sequence's or a segment's end (``segment_ends``: exclusive offsets) and inside the span once
    ``budget`` tokens are masked. Returns the (first, last) spans, touching ones merged."""
    n, lengths, ends = len(is_word_start), np.arange(1, max_words + 1), set(segment_ends) | {len(is_word_start)}
    len_distrib = p * (1 - p) ** (lengths - 1)
    len_distrib /= len_distrib.sum()

    def word_start(i):
        while i > 0 and not is_word_start[i] and i not in ends:
            i -= 1
        return i

    def word_end(i):  # exclusive
        i += 1
        while i not in ends and not is_word_start[i]:
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
            if num_words >= span_len or right in ends or len(mask) >= budget:
                break
            left, right = right, word_end(right)
    merged = []
    for first, last in sorted(spans):
        if merged and merged[-1][1] + 1 >= first and first not in ends:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return merged


def runs(selected):
    """(first, last) of the maximal runs of True."""
    edges = np.flatnonzero(np.diff(selected.astype(np.int8), prepend=0, append=0))
    return [(a, b - 1) for a, b in zip(edges[::2], edges[1::2])]


def span_statistics(task, tokens_per_sample):
    """Per sequence (maskable, selected), and the lengths in words of our spans and of SpanBERT's
    on the same maskable tokens ([CLS], [SEP] removed) with the same number of tokens to select."""
    dataset, d = task.dataset("train"), task.source_dictionary
    counts, ours, reference = [], [], []
    rng = np.random.default_rng(tokens_per_sample)
    for epoch in range(1, EPOCHS[tokens_per_sample] + 1):
        dataset.set_epoch(epoch)
        for index in range(len(dataset)):
            item = dataset[index]
            target = item["target"].numpy() != d.pad()
            tokens = np.where(target, item["target"].numpy(), item["source"].numpy())
            separators = np.flatnonzero(tokens == d.eos())
            assert len(separators) == 2 and not target[0] and not target[separators].any()
            positions = np.flatnonzero(tokens >= d.nspecial)
            counts.append((len(positions), target.sum()))
            units = task.masker.choose_units(tokens, positions, target.sum(), rng)
            assert all((u < separators[0]).all() or (u > separators[0]).all() for u in units)  # no unit crosses [SEP]
            word_index = np.cumsum(task.masker.word_starts[tokens]) - 1  # specials count as word starts
            is_word_start = task.masker.word_starts[tokens[positions]]
            spans = spanbert_spans(is_word_start, target.sum(), rng, [separators[0] - 1])  # B starts at offset sep-1
            for spans_at, out in ((runs(target), ours), (positions[np.array(spans)], reference)):
                out += [word_index[last] - word_index[first] + 1 for first, last in spans_at]
    return np.array(counts), np.array(ours), np.array(reference)


@pytest.fixture(scope="module", params=[64, 128, 512])
def statistics(request, tiny_bert_corpus):
    cfg = MlmNspConfig(data=str(tiny_bert_corpus.data_bin), tokens_per_sample=request.param, seed=1, span_masking=True)
    task = MlmNspTask.setup_task(OmegaConf.structured(cfg))
    task.load_dataset("train")
    return span_statistics(task, request.param)


def test_selected_tokens_are_15_percent_within_one_token(statistics):
    """The documented tolerance: every sequence selects ⌊15%⌋ or ⌈15%⌉ of its maskable tokens (at least
    one), and over all sequences the rate is 15% ± 0.5%."""
    counts, _, _ = statistics
    maskable, selected = counts[:, 0], counts[:, 1]
    assert abs(selected.sum() / maskable.sum() - MASK_PROB) < 0.005
    ceiling = np.maximum(1, np.ceil(MASK_PROB * maskable - 1e-9))
    assert (selected <= ceiling).all() and (selected >= np.floor(MASK_PROB * maskable + 1e-9)).all()


def test_span_lengths_match_spanbert(statistics):
    """Span lengths in words (after SpanBERT's truncation at the budget and merging of touching spans):
    our histogram and SpanBERT's, 1..7 and 8+ words, are not told apart by a chi-square test (p > 0.001)."""
    _, ours, reference = statistics
    assert len(ours) > 900 and len(reference) > 900
    bins = np.arange(1, LONGEST_BIN + 2)
    table = [np.histogram(np.minimum(x, LONGEST_BIN), bins)[0] for x in (ours, reference)]
    p_value = chi2_contingency(table)[1]
    assert p_value > 1e-3, f"p = {p_value:.2g}: mean {ours.mean():.2f} words vs SpanBERT's {reference.mean():.2f}"

"""Span lengths before and after one budget for A and B, against SpanBERT's algorithm, on the same
mlm_nsp sequences: mean span length in words, the share of one-word spans, the percent of maskable
tokens selected, and the chi-square p-value of each histogram (1..7, 8+ words) against SpanBERT's
run with the same budgets. Usage: lengths.py CORPUS_DATA_BIN OLD_MASKING_PY (see commands.sh)."""
import math
import sys

import numpy as np
from omegaconf import OmegaConf
from scipy.stats import chi2_contingency

from docs.results.span_masking_audit.audit import load_module
from fairseq_normformer.tasks.mlm_nsp import MlmNspConfig, MlmNspTask
from tests.data.test_span_masking import LONGEST_BIN, runs, spanbert_spans

DRAWS = 4  # maskings of each sequence


def span_words(spans, word_index):
    return [word_index[last] - word_index[first] + 1 for first, last in spans]


def measure(data_bin, old, tokens_per_sample):
    """{column: (span lengths in words, selected fraction per masking)}."""
    task = MlmNspTask.setup_task(OmegaConf.structured(
        MlmNspConfig(data=data_bin, tokens_per_sample=tokens_per_sample, seed=1, span_masking=True)))
    task.load_dataset("train")
    dataset, d = task.dataset("train"), task.source_dictionary
    maskers = {"before": old.Masker(old.MaskingConfig(spans=True), d, task.mask_idx), "after": task.masker}
    columns = {name: ([], []) for name in ("before", "after", "same", "ceil", "ceil_per_segment")}
    rng = np.random.default_rng(0)
    for index in range(len(dataset)):
        tokens = dataset.dataset[index]["tokens"].numpy()
        positions = np.flatnonzero(tokens >= d.nspecial)
        b_start = np.flatnonzero(tokens == d.eos())[0] - 1  # B's first offset among the maskable positions
        is_word_start = task.masker.word_starts[tokens[positions]]
        word_index = np.cumsum(task.masker.word_starts[tokens]) - 1
        maskable = tokens >= d.nspecial
        for _ in range(DRAWS):
            for name, masker in maskers.items():
                target = masker(tokens, maskable, rng)[1] != d.pad()
                columns[name][0].extend(span_words(runs(target), word_index))
                columns[name][1].append(target.sum() / len(positions))
            budgets = {"same": [(0, len(positions), target.sum())],  # as many as "after"
                       "ceil": [(0, len(positions), math.ceil(0.15 * len(positions)))],
                       "ceil_per_segment": [(0, b_start, math.ceil(0.15 * b_start)),
                                            (b_start, len(positions), math.ceil(0.15 * (len(positions) - b_start)))]}
            for name, segments in budgets.items():
                spans = [[first + a, first + b] for first, stop, budget in segments
                         for a, b in spanbert_spans(is_word_start[first:stop], budget, rng, [b_start - first])]
                columns[name][0].extend(span_words(positions[np.array(spans)], word_index))
                columns[name][1].append(sum(b - a + 1 for a, b in spans) / len(positions))
    return {name: (np.array(words), np.array(rates)) for name, (words, rates) in columns.items()}


def p_value(words, reference):
    bins = np.arange(1, LONGEST_BIN + 2)
    return chi2_contingency([np.histogram(np.minimum(w, LONGEST_BIN), bins)[0] for w in (words, reference)])[1]


def main(data_bin, old_masking):
    old = load_module(old_masking)
    names = {"before": "before", "after": "after", "same": "SpanBERT, same budgets",
             "ceil": "SpanBERT, ⌈15%⌉ of A+B", "ceil_per_segment": "SpanBERT, ⌈15%⌉ of A and of B"}
    print("| tokens | " + " | ".join(names.values()) + " | p before | p after |")
    print("|---|" + "---|" * (len(names) + 2))
    for tokens_per_sample in (64, 128, 512):
        columns = measure(data_bin, old, tokens_per_sample)
        cells = [f"{w.mean():.2f} ({100 * np.mean(w == 1):.0f}%, {100 * r.mean():.1f}%)" for w, r in columns.values()]
        p = [f"{p_value(columns[k][0], columns['same'][0]):.2g}" for k in ("before", "after")]
        print(f"| {tokens_per_sample} | " + " | ".join(cells + p) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:])

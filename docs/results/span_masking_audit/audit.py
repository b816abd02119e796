"""Span masking before and after the exact-budget fix, and SpanBERT's own algorithm, on the same
mlm_nsp sequences: percent of maskable tokens selected, the worst sequence, and the share of
spans that straddle [SEP]. Usage: audit.py CORPUS_DATA_BIN OLD_MASKING_PY (see commands.sh)."""
import importlib.util
import math
import sys

import numpy as np
from omegaconf import OmegaConf

from fairseq_normformer.data.masking import MaskingConfig
from fairseq_normformer.tasks.mlm_nsp import MlmNspConfig, MlmNspTask
from tests.data.test_span_masking import spanbert_spans


def load_module(path):
    spec = importlib.util.spec_from_file_location("old_masking", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(data_bin, old, tokens_per_sample):
    task = MlmNspTask.setup_task(OmegaConf.structured(
        MlmNspConfig(data=data_bin, tokens_per_sample=tokens_per_sample, seed=1, span_masking=True)))
    task.load_dataset("train")
    dataset, d = task.dataset("train"), task.source_dictionary
    old_masker = old.Masker(old.MaskingConfig(spans=True), d, task.mask_idx)
    rng = np.random.default_rng(0)
    rates = {"before": [], "after": [], "spanbert": []}
    straddling = {"before": [0, 0], "after": [0, 0]}
    for index in range(len(dataset)):
        tokens = dataset.dataset[index]["tokens"].numpy()
        maskable = ~np.isin(tokens, [d.bos(), d.eos(), d.pad()])
        sep = np.flatnonzero(tokens == d.eos())
        n = maskable.sum()
        rates["before"].append((old_masker(tokens, maskable, rng)[1] != d.pad()).sum() / n)
        rates["after"].append((dataset[index]["target"].numpy() != d.pad()).sum() / n)
        spanbert = 0
        for first, stop in ((1, sep[0]), (sep[0] + 1, sep[1])):  # SpanBERT: A and B masked separately
            budget = math.ceil(0.15 * (stop - first))
            spans = spanbert_spans(task.masker.word_starts[tokens[first:stop]], budget, rng)
            spanbert += sum(last - start + 1 for start, last in spans)
        rates["spanbert"].append(spanbert / n)
        for name, masker in (("before", old_masker), ("after", task.masker)):
            budget = max(1, int(0.15 * n + rng.random()))
            units = masker.choose_units(tokens, np.flatnonzero(maskable), budget, rng)
            straddling[name][0] += sum(bool((u < sep[0]).any() and (u > sep[0]).any()) for u in units)
            straddling[name][1] += len(units)
    return rates, straddling


def main(data_bin, old_masking):
    old = load_module(old_masking)
    print("| tokens | sequences | before: selected % (max) | after | SpanBERT's algorithm (⌈15%⌉ per segment) "
          "| spans across [SEP] before | after |")
    print("|---|---|---|---|---|---|---|")
    for tokens_per_sample in (64, 128, 512):
        rates, straddling = measure(data_bin, old, tokens_per_sample)
        cells = [f"{100 * np.mean(rates[k]):.1f} ({100 * np.max(rates[k]):.0f})" for k in ("before", "after", "spanbert")]
        crossing = [f"{100 * a / max(b, 1):.1f}%" for a, b in straddling.values()]
        print(f"| {tokens_per_sample} | {len(rates['after'])} | " + " | ".join(cells + crossing) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:])

"""benchmarks/paper_125m.py's parts that run without a 125M model: the GPT-2-sized dictionary over a real
corpus's data, and the per-process CPU clock."""
import os
import time

import pytest
from fairseq.data import Dictionary

from benchmarks.paper_125m import cpu_seconds, gpt2_sized_data
from fairseq_normformer import memory_plan


def test_the_dictionary_is_gpt2s_size_and_keeps_the_corpus_indices(tiny_lm_corpus, tmp_path):
    data = gpt2_sized_data(tiny_lm_corpus.data_bin, tmp_path / "data")
    corpus, extended = (Dictionary.load(str(d / "dict.txt")) for d in (tiny_lm_corpus.data_bin, data))
    assert len(extended) == memory_plan.GPT2_VOCAB
    assert extended.symbols[: len(corpus)] == corpus.symbols  # the binarized data's indices still mean the same
    assert (data / "train.bin").resolve() == (tiny_lm_corpus.data_bin / "train.bin").resolve()


def test_cpu_seconds_is_this_process_cpu_time():
    before, clock = cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - clock < 0.3:
        pass
    assert cpu_seconds(os.getpid()) - before == pytest.approx(time.process_time() - clock, abs=0.05)


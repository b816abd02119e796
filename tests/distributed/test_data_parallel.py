"""Data-parallel training on CPU (gloo): 2 processes follow the trajectory of 1 process with
--update-freq 2 (the same 2 batches per update, dropout 0), at every update: the causal LM and MLM+SBO
without NSP under torchrun (how the processes start does not depend on the task). The causal LM from one
fairseq-train command (--distributed-world-size 2) and MLM+NSP on two torchrun nodes are checked at every
update by the runs that stop and resume them (test_resume_data_parallel.py)."""
import sys

import pytest
import torch

from .fairseq_runs import (
    NO_DROPOUT,
    UPDATES,
    interval_checkpoint,
    logged_loss,
    logged_updates,
    model_weights,
    one_process_run,
    tiny_bert_args,
    tiny_lm_args,
    train,
)

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
# The key bias's gradient is 0 in exact arithmetic (softmax is shift-invariant along the keys), so
# Adam's normalised step turns the rounding noise of the all-reduce into steps of ±lr: not compared.
ZERO_GRADIENT = "self_attn.k_proj.bias"


def assert_same_trajectory(reference_dir, run_dir, run_log):
    assert sorted(logged_updates(run_log)) == list(range(1, UPDATES + 1))
    assert_same_checkpoints(reference_dir, run_dir, UPDATES)


def assert_same_checkpoints(reference_dir, run_dir, updates: int):
    """The checkpoints of every update hold the same loss and weights (≤ 1e-5)."""
    for update in range(1, updates + 1):
        reference, run = interval_checkpoint(reference_dir, update), interval_checkpoint(run_dir, update)
        assert logged_loss(run) == pytest.approx(logged_loss(reference), abs=1e-5), f"loss at update {update}"
        run_weights = model_weights(run)
        for name, weight in model_weights(reference).items():
            if not name.endswith(ZERO_GRADIENT):
                torch.testing.assert_close(run_weights[name], weight, atol=1e-5, rtol=0, msg=name)


def test_torchrun_world_of_two_matches_update_freq_two(lm_reference, tiny_lm_corpus, tmp_path):
    args = tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path, *NO_DROPOUT, "--max-update", UPDATES)
    log = train(args + ["--distributed-backend", "gloo"], launcher=TORCHRUN).stdout
    assert "distributed init (rank 1): env://" in log
    assert_same_trajectory(lm_reference, tmp_path, log)


def test_spanbert_objectives_world_of_two_match_update_freq_two(tiny_bert_corpus, tmp_path):
    """The issue's command, --span-masking --sbo-loss-weight 1 --no-nsp: it trains and logs MLM and SBO
    accuracy and nothing of NSP, and 2 processes follow 1 process with --update-freq 2 (the SBO loss
    is normalized across workers and accumulation steps)."""
    settings = [*NO_DROPOUT, "--max-update", UPDATES, "--span-masking", "--sbo-loss-weight", "1", "--no-nsp"]
    spanbert_args = lambda save_dir: tiny_bert_args(tiny_bert_corpus.data_bin, save_dir, *settings)
    reference = one_process_run(spanbert_args(tmp_path / "one_process"), tmp_path / "one_process")
    log = train(spanbert_args(tmp_path / "two") + ["--distributed-backend", "gloo"], launcher=TORCHRUN).stdout
    assert "distributed init (rank 1): env://" in log
    for stats in logged_updates(log).values():
        assert {"mlm_loss", "mlm_accuracy", "sbo_loss", "sbo_accuracy"} <= stats.keys()
        assert not any(key.startswith("nsp") for key in stats)
    assert_same_trajectory(reference, tmp_path / "two", log)

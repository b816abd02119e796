"""fairseq-eval-lm throughput: checkpoints from fairseq-train, its "Evaluated" line read back."""
import logging

import pytest

from benchmarks.eval_lm import eval_lm_throughput
from benchmarks.variants import BY_NAME
from fairseq_normformer.analysis.training_log import read_eval_lm_speed

from .conftest import tiny_setup

FAIRSEQ_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"  # fairseq_cli/eval_lm.py


def test_read_eval_lm_speed(tmp_path):
    log = tmp_path / "eval.log"
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter(FAIRSEQ_FORMAT))
    logger = logging.getLogger("fairseq_cli.eval_lm")
    logger.addHandler(handler)
    try:  # the line as fairseq_cli/eval_lm.py formats it
        logger.warning("Evaluated {:,} tokens in {:.1f}s ({:.2f} tokens/s)".format(10752, 17.1, 628.89))
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert read_eval_lm_speed(log) == {"tokens": 10752, "seconds": 17.1, "tokens_per_second": 628.89}
    (tmp_path / "empty.log").write_text("no such line\n")
    with pytest.raises(ValueError, match="empty.log holds no 'Evaluated N tokens"):
        read_eval_lm_speed(tmp_path / "empty.log")


@pytest.mark.slow
def test_eval_lm_throughput_of_fairseq_train_checkpoints(tiny_lm_corpus, tmp_path):
    """fairseq-train drops fairseq's own --scale-* flags (the checkpoint has no Post-Attn LN)."""
    variant = BY_NAME["fairseq_scale_flags"]
    result = eval_lm_throughput([variant], tiny_setup(variant.name), tiny_lm_corpus.data_bin, tmp_path, "cpu", 1)
    (run,) = result["runs"]["fairseq_scale_flags"]
    assert set(run) == {"wall", "cpu"} and run["wall"] > 0 and run["cpu"] > 0
    assert result["fairseq_train_drops_scale_flags"] is True
    assert read_eval_lm_speed(tmp_path / "eval_lm_fairseq_scale_flags.log")["tokens"] > 0

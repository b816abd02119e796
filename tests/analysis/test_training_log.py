"""Reading fairseq-train logs, written here by fairseq's own progress bars, and time-to-target."""
import logging
from collections import OrderedDict

import pytest
from fairseq.logging import progress_bar

from fairseq_normformer.analysis.time_to_target import time_to_target
from fairseq_normformer.analysis.training_log import read_training_log

FAIRSEQ_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"  # fairseq_cli/train.py


def write_log(path, fmt, valid_ppl: dict, seconds_per_update: float, updates=6, params=1234567):
    """A log as fairseq-train writes it: train_inner stats every update, validation at the given updates."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(FAIRSEQ_FORMAT))
    loggers = [logging.getLogger(progress_bar.__name__), logging.getLogger("fairseq_cli.train")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        loggers[1].info(f"num. shared model params: {params:,} (num. trained: {params:,})")
        train = progress_bar.progress_bar(range(updates), log_format=fmt, log_interval=1, epoch=1)
        for i, _ in enumerate(train, 1):
            stats = OrderedDict(loss=7.0 - i / 10, num_updates=i, lr=1e-3 * i, wall=round(seconds_per_update * i))
            train.log(stats, tag="train_inner", step=i)
            if i in valid_ppl:
                valid = progress_bar.progress_bar([], log_format=fmt, epoch=1, prefix="valid on 'valid' subset")
                valid.print(OrderedDict(loss=6.0, ppl=valid_ppl[i], num_updates=i), tag="valid", step=i)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()
    return path


@pytest.mark.parametrize("fmt", ["json", "simple"])
def test_train_and_valid_records_in_both_formats(tmp_path, fmt):
    log = read_training_log(write_log(tmp_path / "train.log", fmt, {3: 40.5, 6: 20.25}, seconds_per_update=10))
    assert [r["num_updates"] for r in log.train] == [1, 2, 3, 4, 5, 6]
    assert log.train[2]["lr"] == pytest.approx(3e-3) and log.train[2]["wall"] == 30
    assert [(r["num_updates"], r["ppl"]) for r in log.valid] == [(3, 40.5), (6, 20.25)]
    assert log.num_params == 1234567 and log.failure is None
    assert log.wall_at(4) == 40


@pytest.mark.parametrize("fmt", ["json", "simple"])
def test_time_to_target_is_the_first_validation_at_the_baselines_final_ppl(tmp_path, fmt):
    baseline = read_training_log(write_log(tmp_path / "b.log", fmt, {2: 50.0, 4: 30.0, 6: 20.0}, 10))
    candidate = read_training_log(write_log(tmp_path / "c.log", fmt, {2: 40.0, 4: 19.0, 6: 15.0}, 12))
    result = time_to_target(baseline, candidate)
    # target 20 (baseline, update 6, wall 60 s); first candidate ppl <= 20 is 19 at update 4, wall 48 s
    assert (result.target_ppl, result.baseline_updates, result.baseline_wall) == (20.0, 6, 60)
    assert (result.hit_update, result.hit_ppl, result.hit_wall, result.previous_update) == (4, 19.0, 48, 2)
    assert result.update_fraction == pytest.approx(4 / 6) and result.wall_fraction == pytest.approx(0.8)

    at_first = read_training_log(write_log(tmp_path / "f.log", fmt, {2: 20.0, 4: 18.0, 6: 15.0}, 12))
    assert (time_to_target(baseline, at_first).hit_update, time_to_target(baseline, at_first).previous_update) == (2, 0)

    never = read_training_log(write_log(tmp_path / "n.log", fmt, {2: 45.0, 4: 25.0, 6: 21.0}, 12))
    missed = time_to_target(baseline, never)
    assert (missed.hit_update, missed.previous_update, missed.update_fraction) == (None, None, None)


def test_missing_validation_and_foreign_logs_are_named(tmp_path):
    no_valid = read_training_log(write_log(tmp_path / "t.log", "json", {}, 10))
    with pytest.raises(ValueError, match="no validation results"):
        no_valid.final_valid()
    foreign = tmp_path / "tqdm.log"
    foreign.write_text("epoch 001:  10%|█         | 10/100 [00:01<00:09, loss=7.1]\n")
    with pytest.raises(ValueError, match="--log-format json or simple"):
        read_training_log(foreign)

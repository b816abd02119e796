"""run_cli runs a console script in the test's process (tests/conftest.py in_process): what it prints is what
a real process prints, and a second run inherits nothing of the first (best loss, tensorboard writers)."""
import contextlib
import io
import re
import warnings

import pytest
import torch

from tests.conftest import TINY, TRAIN, USER_DIR, in_process, printed_warnings, python_warnings, run_cli

LOGGED = re.compile(r"\| (?:train_inner|valid|train) \| .*")  # the training's numbers, not its times
NUMBERS = re.compile(r"\b(?:loss|ppl|best_loss|num_updates|lr|gnorm|mlm_loss|nsp_loss|nsp_acc)[ =][-\d.]+")


def train(data_bin, save_dir, process, updates=4):
    """A tiny BERT validated and saved every 2 updates (the second validation logs the best loss so far)."""
    args = ["fairseq-train", data_bin, "--user-dir", USER_DIR, "--task", "mlm_nsp", "--criterion", "mlm_nsp",
            "--arch", "normformer_bert_base", *TINY, "--tokens-per-sample", "64", *TRAIN, "--max-update", updates,
            "--validate-interval-updates", "2", "--save-interval-updates", "2", "--save-dir", save_dir,
            "--no-epoch-checkpoints", "--tensorboard-logdir", save_dir / "tb"]  # fmt: skip
    return run_cli(args, process=process).stdout


def logged_numbers(stdout: str) -> list:
    return [NUMBERS.findall(line) for line in LOGGED.findall(stdout)]


@pytest.mark.slow
def test_in_process_prints_the_numbers_of_a_real_process_and_a_second_run_starts_afresh(tiny_bert_corpus, tmp_path):
    data = tiny_bert_corpus.data_bin
    real = logged_numbers(train(data, tmp_path / "process", process=True))
    longer = logged_numbers(train(data, tmp_path / "longer", process=False, updates=8))  # reaches a lower loss
    again = logged_numbers(train(data, tmp_path / "again", process=False))
    assert any(n.startswith("best_loss") for numbers in real for n in numbers)
    assert longer[: len(real) - 1] == real[:-1]  # the same numbers until the real run's end
    assert again == real  # not the longer run's best loss
    for name in ("process", "longer", "again"):  # each run's own tensorboard logs, closed (readable)
        assert {p.parent.name for p in (tmp_path / name / "tb").rglob("events.out.tfevents.*")} >= {"train", "valid"}


def test_in_process_runs_with_the_threads_of_omp_num_threads_and_sets_them_back():
    """A new process's torch uses OMP_NUM_THREADS threads (the order of its float sums, so its numbers)."""
    before = torch.get_num_threads()
    for threads in ("1", "2"):
        result = in_process(lambda: print(torch.get_num_threads()), ["main"], ".", {"OMP_NUM_THREADS": threads}, None)
        assert result.stdout == f"{threads}\n" and torch.get_num_threads() == before


def test_printed_warnings_are_a_new_process_s_on_the_captured_stderr():
    """printed_warnings: a warning of the run's own printed where python_warnings reads it, under pytest's recorder;
    the ones a new process does not print (Python's default filters, fixes/warning_filters.py) left out."""
    stderr = io.StringIO()
    with printed_warnings(), contextlib.redirect_stderr(stderr):
        warnings.warn("a warning of the run's own", UserWarning)
        warnings.warn("ignored by Python's default filters", DeprecationWarning)
        warnings.warn_explicit("'pin_memory' argument is set as true but no accelerator is found", UserWarning,
                               "dataloader.py", 1, module="torch.utils.data.dataloader")  # fmt: skip
    assert [line.split(": ", 1)[1] for line in python_warnings(stderr.getvalue())] == [
        "UserWarning: a warning of the run's own"]

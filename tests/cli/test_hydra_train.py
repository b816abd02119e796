"""fairseq-hydra-train with examples/hydra/normformer_lm_tiny.yaml, as its header says: relative paths from
where the user stands, no nested directories, no warning or DEBUG line; SIGTERM saves checkpoint_last at
the signal's update, exits 75, and the same command resumes to the uninterrupted run's losses and weights.
Without the config's LoadPlugin callback one line says what is off."""
import json
import re
import signal
import subprocess

import pytest
import torch

from ..conftest import REPO_ROOT, python_warnings
from ..distributed.fairseq_runs import BIN, model_weights, start_program

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

UPDATES = 12
STOPPED = re.compile(r"^fairseq-hydra-train: stopped by SIGTERM at update (\d+) \(received after update \d+\); "
                     r"checkpoints/hydra_tiny/checkpoint_last.pt saved: run the same command to resume$", re.M)  # fmt: skip
TRAIN_INNER = re.compile(r"\]\[train_inner\]\[INFO\] - (\{.*\})")


def hydra_command(*overrides, multirun=False) -> list:
    """The header's command (relative paths), with a few updates, a log line each and no interval save; with
    ``multirun`` its -m form, which takes no checkpoint.save_dir."""
    save = ["--multirun"] if multirun else []
    return [str(BIN / "fairseq-hydra-train"), *save, "--config-dir", str(REPO_ROOT / "examples/hydra"),
            "--config-name", "normformer_lm_tiny", "task.data=work/corpus/data-bin", f"common.user_dir={REPO_ROOT / 'fairseq_normformer'}",
            *([] if multirun else ["checkpoint.save_dir=checkpoints/hydra_tiny"]), f"optimization.max_update={UPDATES}",
            f"lr_scheduler.total_num_update={UPDATES}", "common.log_interval=1", "checkpoint.save_interval_updates=1000",
            *overrides]  # fmt: skip


def user_dir_with_corpus(tmp_path, name, data_bin):
    where = tmp_path / name
    (where / "work").mkdir(parents=True)
    (where / "work" / "corpus").symlink_to(data_bin.parent)
    return where


def start(where, *overrides, **multirun):
    return start_program(hydra_command(*overrides, **multirun), cwd=where, stderr=subprocess.PIPE)


def run_to_the_end(tmp_path, name, data_bin, *overrides, **multirun) -> tuple:
    """(exit status, stderr, the directory it ran in) of the header's command with ``overrides``."""
    where = user_dir_with_corpus(tmp_path, name, data_bin)
    run = start(where, *overrides, **multirun)
    _, stderr = run.communicate(timeout=300)
    return run.returncode, stderr, where


def losses(stdout: str) -> dict:
    updates = (json.loads(line) for line in TRAIN_INNER.findall(stdout))
    return {int(stats["num_updates"]): stats["loss"] for stats in updates}


@pytest.fixture(scope="module")
def uninterrupted(tiny_lm_corpus, tmp_path_factory):
    where = user_dir_with_corpus(tmp_path_factory.mktemp("hydra"), "uninterrupted", tiny_lm_corpus.data_bin)
    run = start(where)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    return where, stdout, stderr


def test_the_example_runs_as_its_header_says(uninterrupted):
    where, stdout, stderr = uninterrupted
    assert stderr == "" and not python_warnings(stdout) and "DEBUG" not in stdout
    save_dir = where / "checkpoints" / "hydra_tiny"
    assert sorted(path.name for path in save_dir.iterdir()) == [
        ".hydra", "checkpoint_best.pt", "checkpoint_last.pt", "hydra_train.log"]  # nothing nested
    assert sorted(losses(stdout)) == list(range(1, UPDATES + 1))


def test_sigterm_saves_at_the_signal_and_the_same_command_resumes(uninterrupted, tiny_lm_corpus, tmp_path):
    reference_dir, reference_stdout, _ = uninterrupted
    where = user_dir_with_corpus(tmp_path, "preempted", tiny_lm_corpus.data_bin)
    run, before = start(where), []
    for line in run.stdout:
        before.append(line)
        if TRAIN_INNER.search(line) and '"num_updates": "3"' in line:
            run.send_signal(signal.SIGTERM)
            break
    stdout, stderr = run.communicate(timeout=300)
    stdout = "".join(before) + stdout
    assert run.returncode == 75, stderr[-3000:]
    (stopped_at,) = map(int, STOPPED.findall(stderr))
    assert "Traceback" not in stderr and max(losses(stdout)) == stopped_at < UPDATES
    last = where / "checkpoints" / "hydra_tiny" / "checkpoint_last.pt"
    assert torch.load(last, map_location="cpu")["optimizer_history"][-1]["num_updates"] == stopped_at
    resumed = start(where)
    resumed_stdout, resumed_stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0 and resumed_stderr == "", resumed_stderr[-3000:]
    assert {**losses(stdout), **losses(resumed_stdout)} == losses(reference_stdout)
    reference_weights = model_weights(reference_dir / "checkpoints" / "hydra_tiny" / "checkpoint_last.pt")
    for name, weight in model_weights(last).items():
        torch.testing.assert_close(weight, reference_weights[name], atol=1e-5, rtol=0, msg=name)


def test_without_the_callback_one_line_says_what_is_off(tiny_lm_corpus, tmp_path):
    status, stderr, _ = run_to_the_end(tmp_path, "no_callback", tiny_lm_corpus.data_bin,
                                       "~hydra.callbacks.normformer", "optimization.max_update=1")  # fmt: skip
    assert status == 0 and stderr == (
        "fairseq-hydra-train: warning: fairseq_normformer was loaded inside fairseq's train.main (common.user_dir), "
        "after the launch: save-on-signal and the command-line checks are off for this run; fairseq-hydra-train: add "
        "hydra.callbacks.normformer._target_=fairseq_normformer.hydra_callback.LoadPlugin (docs/hydra.md)\n"
    )


def test_a_preset_as_model_name_is_refused_before_the_launch(tiny_lm_corpus, tmp_path):
    """model._name=<preset> would train the dataclass's 512-dim 6-layer model (docs/hydra.md#the-papers-presets)."""
    status, stderr, where = run_to_the_end(tmp_path, "preset_name", tiny_lm_corpus.data_bin,
                                           "model._name=preln_lm_gpt3_small")  # fmt: skip
    assert status == 2 and stderr == (
        "fairseq-hydra-train: error: model._name=preln_lm_gpt3_small is an --arch preset, which fairseq-hydra-train "
        "would fill with the model's defaults, not the preset's sizes; use its config instead: model=preln_lm_gpt3_small "
        "with --config-dir examples/hydra (docs/hydra.md)\n"
    )
    assert not (where / "checkpoints").exists()  # refused before hydra made the run's directory


def test_bad_input_in_the_job_is_one_line_as_fairseq_trains(tiny_lm_corpus, tmp_path):
    """The command-line checks refuse inside the job, where hydra printed "Error executing job" and a traceback."""
    status, stderr, _ = run_to_the_end(tmp_path, "bad_size", tiny_lm_corpus.data_bin, "model.decoder_embed_dim=0")
    assert status == 1 and stderr == (
        "fairseq-hydra-train: error: --decoder-embed-dim 0: model sizes (dimensions, layers, attention heads) "
        "must be positive\n"
    )


def test_a_multirun_over_two_seeds_trains_both_in_their_own_save_dirs(tiny_lm_corpus, tmp_path):
    """Issue 53: -m common.seed=1,2 shared one save dir (seed 2 resumed seed 1's finished checkpoint_last and
    trained nothing) and wrote multirun/ where it ran. Job N of hydra.sweep.dir=DIR now saves into DIR/N."""
    status, stderr, where = run_to_the_end(tmp_path, "seeds", tiny_lm_corpus.data_bin, "common.seed=1,2",
                                           multirun=True)  # fmt: skip
    assert status == 2 and stderr.startswith("fairseq-hydra-train: error: a multirun (-m) needs hydra.sweep.dir=DIR")
    status, stderr, where = run_to_the_end(tmp_path, "seeds_dir", tiny_lm_corpus.data_bin, "common.seed=1,2",
                                           "hydra.sweep.dir=checkpoints/seeds", multirun=True)  # fmt: skip
    assert status == 0, stderr[-3000:]
    assert sorted(path.name for path in where.iterdir()) == ["checkpoints", "work"]  # no multirun/ where it ran
    sweep = where / "checkpoints" / "seeds"
    trained = {}
    for job, seed in ((0, 1), (1, 2)):
        job_dir = sweep / str(job)
        assert {"checkpoint_last.pt", "checkpoint_best.pt"} <= {path.name for path in job_dir.iterdir()}
        state = torch.load(job_dir / "checkpoint_last.pt", map_location="cpu", weights_only=False)
        assert state["cfg"]["common"]["seed"] == seed and state["cfg"]["checkpoint"]["save_dir"] == str(job_dir)
        trained[seed] = losses((job_dir / "hydra_train.log").read_text())
        assert sorted(trained[seed]) == list(range(1, UPDATES + 1))  # every update trained, none resumed
    assert trained[1] != trained[2]  # two seeds, two trainings


def test_a_multirun_with_one_save_dir_for_every_job_is_refused(tiny_lm_corpus, tmp_path):
    status, stderr, where = run_to_the_end(tmp_path, "shared", tiny_lm_corpus.data_bin, "common.seed=1,2",
                                           "checkpoint.save_dir=checkpoints/seeds", multirun=True)  # fmt: skip
    assert status == 2 and stderr == (
        "fairseq-hydra-train: error: checkpoint.save_dir=checkpoints/seeds in a multirun: every job would save there, "
        "and each after the first would resume the first's finished checkpoint_last.pt and train nothing; give "
        "hydra.sweep.dir=checkpoints/seeds instead (job N saves into checkpoints/seeds/N, docs/hydra.md)\n"
    )
    assert sorted(path.name for path in where.iterdir()) == ["work"]  # refused before anything was written

"""Save on a signal (fixes/save_on_signal.py): SIGTERM to one rank of a 2-process run, or to one of
two torchrun launchers, between saves: every rank stops after the same update, checkpoint_last is
at that update, the run exits 75 with one line, and the same command resumes to the uninterrupted
run's losses and weights. The launch scripts forward the signal; torchrun's launcher
(fairseq_normformer/runs/torchrun.py) then ends with 75 and one line, no traceback.
NORMFORMER_SAVE_ON_SIGNAL=none keeps fairseq's behaviour."""
import importlib.util
import re
import signal
import subprocess
import sys

import pytest
import torch
from fairseq_cli import train as train_cli

from fairseq_normformer.checks import BadInput

from ..conftest import REPO_ROOT
from .fairseq_runs import logged_loss, logged_updates, model_weights, spawned_ranks, start, tiny_lm_args, train
from .test_launch_scripts import TINY_OVERRIDES, cpu_env, fake_slurm, free_port
from .test_resume_data_parallel import GLOO, finish, merged_updates, read_until_update, start_two_nodes

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

QUIET_TORCHRUN = [sys.executable, "-P", str(REPO_ROOT / "fairseq_normformer" / "runs" / "torchrun.py")]

UPDATES = 40  # many more than the updates the test needs to send its signal
SIGNALLED_AFTER = 3  # the update logged before the signal is sent
STOPPED = re.compile(r"fairseq-train: stopped by (SIG\w+) at update (\d+) \(received after update (\d+)\); "
                     r"(\S+) saved: run the same command to resume")  # fmt: skip


def between_saves(data_bin, save_dir, *extra) -> list:
    return tiny_lm_args(data_bin, save_dir, "--max-update", UPDATES, "--save-interval-updates", 1000, *GLOO, *extra)


def checkpoint_update(path) -> int:
    return torch.load(path, map_location="cpu")["optimizer_history"][-1]["num_updates"]


def assert_stopped_at_the_signal(output: str, save_dir, signal_name="SIGTERM") -> int:
    """The one line, the update it names logged last and saved in checkpoint_last.pt; that update."""
    (name, update, received_after, path), = STOPPED.findall(output)
    update, received_after = int(update), int(received_after)
    # a rank other than 0 may still be finishing the update rank 0 logged when the signal came
    assert name == signal_name and received_after >= SIGNALLED_AFTER - 1 and update - received_after <= 1
    assert max(logged_updates(output)) == update < UPDATES
    assert path == str(save_dir / "checkpoint_last.pt") and checkpoint_update(path) == update
    assert [p.name for p in save_dir.iterdir()] == ["checkpoint_last.pt"]  # no save before the signal
    return update


def assert_resumed_as_uninterrupted(reference, stopped_log, resumed_log, save_dir, stopped_at):
    assert f"Loaded checkpoint {save_dir / 'checkpoint_last.pt'} (epoch 1 @ {stopped_at} updates)" in resumed_log
    losses = {update: stats["loss"] for update, stats in merged_updates([stopped_log, resumed_log]).items()}
    assert losses == {update: stats["loss"] for update, stats in reference["updates"].items()}
    last = save_dir / "checkpoint_last.pt"
    assert logged_loss(last) == pytest.approx(logged_loss(reference["last"]), abs=1e-5)
    reference_weights = model_weights(reference["last"])
    for name, weight in model_weights(last).items():
        torch.testing.assert_close(weight, reference_weights[name], atol=1e-5, rtol=0, msg=name)


@pytest.fixture(scope="module")
def reference(tiny_lm_corpus, tmp_path_factory):
    """The uninterrupted run: 2 processes, UPDATES updates."""
    save_dir = tmp_path_factory.mktemp("uninterrupted")
    log = train(between_saves(tiny_lm_corpus.data_bin, save_dir, "--distributed-world-size", 2)).stdout
    return {"updates": logged_updates(log), "last": save_dir / "checkpoint_last.pt"}


def test_sigterm_to_one_spawned_rank_saves_there_and_resumes_as_uninterrupted(reference, tiny_lm_corpus, tmp_path):
    """SIGTERM to rank 1, twice (the second before or during the save changes nothing); after the
    exit a SIGKILL finds nothing to kill, and checkpoint_last.pt loads."""
    args = between_saves(tiny_lm_corpus.data_bin, tmp_path, "--distributed-world-size", 2)
    run = start(args)
    before = read_until_update(run, SIGNALLED_AFTER)
    rank_1 = spawned_ranks(run)[1]
    rank_1.send_signal(signal.SIGTERM)
    rank_1.send_signal(signal.SIGTERM)
    stopped_log = before + run.communicate(timeout=300)[0]
    assert run.returncode == 75, stopped_log[-3000:]
    stopped_at = assert_stopped_at_the_signal(stopped_log, tmp_path)
    assert "Traceback" not in stopped_log
    resumed = train(args).stdout
    assert_resumed_as_uninterrupted(reference, stopped_log, resumed, tmp_path, stopped_at)


def test_sigterm_to_one_of_two_torchrun_launchers(reference, tiny_lm_corpus, tmp_path):
    """torchrun (through fairseq_normformer/runs/torchrun.py, as train_lm_torchrun.sh runs it) forwards
    SIGTERM to its worker; the other node's worker stops at the same update. Both launchers exit 75
    with one line each, no traceback (torch's own torchrun: 1, SignalException's and ChildFailedError's)."""
    args = between_saves(tiny_lm_corpus.data_bin, tmp_path)
    launchers = start_two_nodes(args, launcher=QUIET_TORCHRUN)
    before = read_until_update(launchers[0], SIGNALLED_AFTER)
    launchers[1].send_signal(signal.SIGTERM)
    logs = finish(launchers)
    assert [launcher.returncode for launcher in launchers] == [75, 75], logs[0][-3000:] + logs[1][-3000:]
    assert_launchers_stopped_quietly(before + logs[0], logs[1])
    stopped_log = before + logs[0]
    stopped_at = assert_stopped_at_the_signal(stopped_log, tmp_path)
    resumed = finish(start_two_nodes(args, launcher=QUIET_TORCHRUN))[0]
    assert_resumed_as_uninterrupted(reference, stopped_log, resumed, tmp_path, stopped_at)


def assert_launchers_stopped_quietly(node_0_log, node_1_log):
    """Node 1's launcher got the signal, node 0's saw its worker exit 75: each ends with its one line."""
    for log, cause in ((node_0_log, "a signal to this or another node"), (node_1_log, "SIGTERM")):
        assert "Traceback" not in log, log[-3000:]
        assert log.strip().splitlines()[-1] == (f"torchrun: the workers stopped on {cause} and saved "
                                                "checkpoint_last: run the same command to resume")  # fmt: skip


def test_sigterm_to_the_torchrun_script_of_one_of_two_nodes(tiny_lm_corpus, tmp_path):
    """examples/slurm/train_lm_torchrun.sh on two nodes; SIGTERM to node 1's script (as Kubernetes sends
    it to a pod's first process): the script forwards it to torchrun (a command in the foreground would
    not get it), both scripts exit 75 with torchrun's one line, checkpoint_last is at the stopped update."""
    port, save_dir = str(free_port()), tmp_path / "checkpoints"
    scripts = [start_script("train_lm_torchrun.sh", tiny_lm_corpus.data_bin, save_dir,
                            cpu_env(NNODES="2", NODE_RANK=str(node), GPUS_PER_NODE="1", MASTER_ADDR="127.0.0.1",
                                    PORT=port, PYTHONUNBUFFERED="1"))
               for node in (0, 1)]  # fmt: skip
    before = read_until_update(scripts[0], SIGNALLED_AFTER)
    scripts[1].send_signal(signal.SIGTERM)
    logs = finish(scripts)
    assert [script.returncode for script in scripts] == [75, 75], logs[0][-3000:] + logs[1][-3000:]
    assert_launchers_stopped_quietly(before + logs[0], logs[1])
    assert_stopped_at_the_signal(before + logs[0], save_dir)


@pytest.mark.skipif(importlib.util.find_spec("fairscale") is None, reason="needs fairscale (requirements/fsdp.txt)")
def test_sigterm_to_a_sharded_run_saves_every_shard_at_the_same_update(tiny_lm_corpus, tmp_path):
    """--ddp-backend fully_sharded --use-sharded-state: each rank saves its shard of checkpoint_last
    (resuming from shards: test_fully_sharded.py)."""
    args = between_saves(tiny_lm_corpus.data_bin, tmp_path, "--distributed-world-size", 2,
                         "--ddp-backend", "fully_sharded", "--use-sharded-state")  # fmt: skip
    run = start(args)
    read_until_update(run, SIGNALLED_AFTER)
    spawned_ranks(run)[1].send_signal(signal.SIGTERM)
    output = run.communicate(timeout=300)[0]
    assert run.returncode == 75, output[-3000:]
    (_, update, _, path), = STOPPED.findall(output)
    shards = sorted(p.name for p in tmp_path.iterdir())
    assert shards == ["checkpoint_last-shard0.pt", "checkpoint_last-shard1.pt"] and path.endswith(shards[0])
    assert [checkpoint_update(tmp_path / shard) for shard in shards] == [int(update)] * 2


def start_script(script, data_bin, save_dir, env) -> subprocess.Popen:
    """examples/slurm/SCRIPT on the tiny model, UPDATES updates with no save before them, its output to a pipe."""
    overrides = [arg for arg in TINY_OVERRIDES if arg != "--no-save"] + ["--max-update", str(UPDATES)]
    return subprocess.Popen(["bash", f"examples/slurm/{script}", str(data_bin), str(save_dir), *overrides],
                            cwd=REPO_ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def start_sbatch(data_bin, save_dir, slurm_bin) -> subprocess.Popen:
    """examples/slurm/train_lm.sbatch with 2 tasks under the stand-in srun, saving between saves."""
    env = cpu_env(slurm_bin, SLURM_NTASKS_PER_NODE="2", SLURM_NNODES="1", SLURM_JOB_NODELIST="node0",
                  SLURM_JOB_ID="4242", SLURM_SUBMIT_DIR=str(REPO_ROOT), PYTHONUNBUFFERED="1")  # fmt: skip
    return start_script("train_lm.sbatch", data_bin, save_dir, env)


def test_the_sbatch_script_forwards_usr1_and_requeues(tiny_lm_corpus, tmp_path):
    """SLURM's USR1 (#SBATCH --signal=B:USR1@120) reaches the batch script, which forwards it to the
    job step; the tasks save and exit 75, and the script requeues the job (the requeued job is the same
    command, whose resume the tests above check)."""
    slurm_bin, save_dir = fake_slurm(tmp_path), tmp_path / "checkpoints"
    job = start_sbatch(tiny_lm_corpus.data_bin, save_dir, slurm_bin)
    before = read_until_update(job, SIGNALLED_AFTER)
    job.send_signal(signal.SIGUSR1)
    stopped_log = before + job.communicate(timeout=300)[0]
    assert job.returncode == 75, stopped_log[-3000:]
    assert_stopped_at_the_signal(stopped_log, save_dir, "SIGUSR1")
    assert (slurm_bin / "requeued").read_text() == "4242\n"


def test_none_keeps_fairseqs_behaviour(tiny_lm_corpus, tmp_path):
    run = start(between_saves(tiny_lm_corpus.data_bin, tmp_path), NORMFORMER_SAVE_ON_SIGNAL="none")
    read_until_update(run, SIGNALLED_AFTER)
    run.send_signal(signal.SIGTERM)
    output = run.communicate(timeout=300)[0]
    assert run.returncode == -signal.SIGTERM and not STOPPED.search(output)
    assert list(tmp_path.iterdir()) == []


def test_a_bad_signal_list_is_refused_in_one_line(tiny_lm_corpus, tmp_path, monkeypatch):
    """In this process: the BadInput fairseq-train prints as its one line (tests/test_bad_input.py runs one for real)."""
    monkeypatch.setenv("NORMFORMER_SAVE_ON_SIGNAL", "SIGTERM,SIGFOO")
    monkeypatch.setattr(sys, "argv", ["fairseq-train", *map(str, between_saves(tiny_lm_corpus.data_bin, tmp_path))])
    message = ("NORMFORMER_SAVE_ON_SIGNAL must be signal names such as SIGTERM,SIGUSR1 (the default) "
               "or none, not 'SIGTERM,SIGFOO'")  # fmt: skip
    with pytest.raises(BadInput, match=f"^{re.escape(message)}$"):
        train_cli.cli_main()

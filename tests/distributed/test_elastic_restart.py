"""torchrun --max-restarts 1 with a worker SIGKILLed mid-run: torchrun restarts the group, which
resumes from checkpoint_last.pt and finishes by itself, at every update equal to 1 process with
--update-freq 2 (what 2 uninterrupted processes equal, test_data_parallel.py): one node (--standalone,
2 processes) and two simulated nodes (one process each), with a static rendezvous and with c10d's.

The restarted rank 0 is held (SIGSTOP) until the restarted rank 1 has begun its process-group init,
as when one node restarts later than another: before the torchrun_restarts fix rank 1 then read the
dead rank 0's address from torchrun's store and failed ("Connection refused"), or waited."""
import signal
import subprocess
import threading
import time

import psutil
import pytest

from .fairseq_runs import NO_DROPOUT, UPDATES, tiny_lm_args
from .fork_server import environment
from .test_data_parallel import TORCHRUN, assert_same_checkpoints
from .test_resume_data_parallel import GLOO, merged_updates, start_launcher, start_two_nodes

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

RESTARTS = ["--max-restarts", "1"]
# Rank 1 is SIGKILLed, from the thread that reads the launchers' output, as soon as rank 0 has saved the checkpoint
# of update 1: UPDATES - 1 updates, each with an all-reduce rank 1 must join, are then still to run. (Killed after
# rank 0's log line of update UPDATES // 2, as the test first did, a loaded machine could deliver the kill after the
# last all-reduce: rank 0 finished, exit 0, and rank 1's restart found no one to rendezvous with, exit 1.)
KILL_AT = "@ 1 updates"  # fairseq: "Saved checkpoint ... (epoch 1 @ 1 updates, ...)"


def c10d_rendezvous(port) -> list:
    return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "elastic-test"]


class Printed:
    """What the launchers print, read by a thread each; ``action`` runs in the reading thread, with no delay, at
    the first line that holds ``trigger``."""

    def __init__(self, launchers, trigger: str, action):
        self.lines, self.trigger, self.action, self.acted = [], trigger, action, threading.Event()
        self.lock = threading.Lock()
        self.readers = [threading.Thread(target=self.read, args=(launcher,)) for launcher in launchers]
        for reader in self.readers:
            reader.start()

    def read(self, launcher):
        for line in launcher.stdout:
            self.lines.append(line)
            with self.lock:
                if self.trigger in line and not self.acted.is_set():
                    self.action()
                    self.acted.set()

    def wait_for(self, text: str, times: int = 1):
        while sum(text in line for line in list(self.lines)) < times:
            assert any(reader.is_alive() for reader in self.readers), f"never printed: {text}\n{self.text()[-5000:]}"
            time.sleep(0.1)

    def text(self) -> str:
        return "".join(self.lines)


def worker(launchers, rank: int, not_pids=()) -> psutil.Process:
    """The fairseq-train process of ``rank`` started by the launchers (other than ``not_pids``), once up."""
    while any(launcher.poll() is None for launcher in launchers):
        for launcher in launchers:
            try:
                for process in psutil.Process(launcher.pid).children():
                    if environment(process.pid).get("RANK") == str(rank) and process.pid not in not_pids:
                        return process
            except (psutil.NoSuchProcess, ProcessLookupError):  # a launcher or a worker has just exited
                pass
        time.sleep(0.05)
    raise AssertionError(f"the launchers exited before rank {rank} was (re)started")


def kill_rank_1_and_finish(launchers) -> str:
    """SIGKILL of rank 1 once rank 0 has saved update 1 (KILL_AT); the restarted rank 0 is held until
    the restarted rank 1 is in process-group init. Every launcher must finish by itself, exit 0.
    Returns all they printed."""
    first, found = [], threading.Event()

    def kill_rank_1():
        found.wait(timeout=60)  # the workers are up within seconds, before update 1
        first[1].send_signal(signal.SIGKILL)

    printed = Printed(launchers, KILL_AT, kill_rank_1)
    first += [worker(launchers, rank) for rank in (0, 1)]
    found.set()
    printed.wait_for(KILL_AT)
    assert printed.acted.wait(timeout=60), "rank 1 was not killed"
    restarted_rank_0 = worker(launchers, 0, not_pids=[process.pid for process in first])
    restarted_rank_0.send_signal(signal.SIGSTOP)
    printed.wait_for("distributed init (rank 1)", times=2)
    time.sleep(1)  # rank 1 reads rank 0's address from the store, if there is one
    restarted_rank_0.send_signal(signal.SIGCONT)
    try:
        for launcher in launchers:
            launcher.wait(timeout=300)
    except subprocess.TimeoutExpired:  # a hung restart: end the launchers and their workers
        for launcher in launchers:
            for process in [*psutil.Process(launcher.pid).children(recursive=True), launcher]:
                process.kill()
        raise
    output = printed.text()
    assert [launcher.returncode for launcher in launchers] == [0] * len(launchers), output[-5000:]
    return output


def assert_resumed_as_uninterrupted(output: str, reference_dir, run_dir):
    assert "exitcode: -9" in output and "Loaded checkpoint" in output  # torchrun restarted the group, which resumed
    assert sorted(merged_updates([output])) == list(range(1, UPDATES + 1))
    assert_same_checkpoints(reference_dir, run_dir, UPDATES)


@pytest.fixture
def lm_args(tiny_lm_corpus, tmp_path):
    return tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path, *NO_DROPOUT, "--max-update", UPDATES, *GLOO)


def test_one_node_restarts_and_resumes(lm_reference, lm_args, tmp_path):
    output = kill_rank_1_and_finish([start_launcher(lm_args, [*TORCHRUN, *RESTARTS])])
    assert_resumed_as_uninterrupted(output, lm_reference, tmp_path)


@pytest.mark.parametrize(
    "rendezvous, env",
    [
        ("static", {}),  # --master-addr/--master-port: every agent counts the same restarts
        ("c10d", {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}),  # counts differ: a new store each attempt
    ],
)
def test_two_nodes_restart_and_resume(rendezvous, env, lm_reference, lm_args, tmp_path):
    options = {"rendezvous": c10d_rendezvous} if rendezvous == "c10d" else {}
    output = kill_rank_1_and_finish(start_two_nodes(lm_args, options=RESTARTS, env=env, **options))
    assert_resumed_as_uninterrupted(output, lm_reference, tmp_path)

"""Resuming data-parallel training (gloo, CPU): a run stopped after some updates and started again
with the same command follows 1 process with --update-freq 2 (the reference of test_data_parallel.py,
which 2 uninterrupted processes follow), at every update: 2 processes spawned by fairseq-train
(causal LM, stopped by --max-update) and two torchrun "nodes" one of which is SIGKILLed mid-run
(MLM+NSP; the causal LM's is test_fully_sharded.py's). A dead peer ends the run: a killed one at once,
a frozen one after --heartbeat-timeout seconds."""
import re
import signal
import socket
import subprocess
import sys

import psutil
import pytest

from ..conftest import python_warnings
from .fairseq_runs import NO_DROPOUT, UPDATES, logged_updates, spawned_ranks, start, tiny_bert_args, tiny_lm_args, train
from .test_data_parallel import assert_same_checkpoints

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)
STOPPED_AT = UPDATES // 2  # the first run's --max-update
GLOO = ["--distributed-backend", "gloo"]
LOST_PEER_LINE = re.compile(r"^fairseq-train: error: rank 0 lost another process of the run \(gloo: (.*?)\): "
                            r"run the same command to resume from update (\d+) \((\S+)\)$", re.M)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def static_rendezvous(port) -> list:
    return ["--master-addr", "127.0.0.1", "--master-port", port]


TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def start_two_nodes(args, rendezvous=static_rendezvous, options=(), env=(), launcher=TORCHRUN) -> list:
    """Two torchrun launchers (``launcher``: torchrun's command), one "node" (one process) each, meeting
    at a free port of this machine (``rendezvous(port)``: their rendezvous options), with more torchrun
    ``options`` and environment. Their output (rank 0's log on node 0) goes to a pipe."""
    port = free_port()
    launchers = []
    for node in (0, 1):
        torchrun = [*launcher, "--nnodes", "2", "--node-rank", node,
                    "--nproc-per-node", "1", *rendezvous(port), *options]  # fmt: skip
        launchers.append(start_launcher(args, torchrun, env))
    return launchers


def start_launcher(args, torchrun, env=()):
    """fairseq-train behind ``torchrun`` (its command and options), its output to a pipe."""
    return start(args, torchrun, **dict(env))


def finish(launchers) -> list:
    """What each launcher printed, once both have exited."""
    return [launcher.communicate(timeout=300)[0] for launcher in launchers]


def train_two_nodes(args) -> str:
    """Train to the end on two nodes; node 0's output."""
    launchers = start_two_nodes(args)
    logs = finish(launchers)
    assert [launcher.returncode for launcher in launchers] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    return logs[0]


def read_until_update(launcher, update: int) -> str:
    """Node 0's output up to the line logging ``update``."""
    printed = []
    for line in launcher.stdout:
        printed.append(line)
        if f'"num_updates": "{update}"' in line:
            return "".join(printed)
    raise AssertionError(f"the run ended before update {update}:\n" + "".join(printed)[-3000:])


def worker(launcher) -> psutil.Process:
    """The fairseq-train process a launcher started (one per node)."""
    return psutil.Process(launcher.pid).children()[0]


def merged_updates(logs) -> dict:
    """{update: logged stats} over runs; an update logged by two runs has the same loss in both."""
    merged = {}
    for log in logs:
        for update, stats in logged_updates(log).items():
            assert merged.setdefault(update, stats)["loss"] == stats["loss"], f"update {update} redone differently"
    return merged


def kill_node_1_then_resume(args, updates: int) -> list:
    """Two nodes run ``args`` (``--max-update updates``) until node 0 logs update ``updates // 2``;
    SIGKILL of node 1's process ends both launchers non-zero; the same command then resumes from a
    checkpoint and finishes, and every update is logged, a redone one with the same loss. Returns node 0's
    output of both runs."""
    launchers = start_two_nodes(args)
    before_kill = read_until_update(launchers[0], updates // 2)
    worker(launchers[1]).send_signal(signal.SIGKILL)
    after_kill = finish(launchers)
    assert [launcher.returncode for launcher in launchers] == [1, 1]
    assert "exitcode  : -9" in after_kill[1] and "fairseq-train FAILED" in after_kill[0]
    # node 0's process ends with one line saying how to resume (no traceback), then torchrun reports
    lost = LOST_PEER_LINE.search(after_kill[0])
    assert lost and lost.group(1) in ("Connection closed by peer", "Connection reset by peer"), after_kill[0][-3000:]
    assert "Traceback" not in after_kill[0][: lost.start()]
    resumed = train_two_nodes(args)
    assert f"Loaded checkpoint {lost.group(3)} (epoch 1 @ {lost.group(2)} updates)" in resumed
    assert sorted(merged_updates([before_kill + after_kill[0], resumed])) == list(range(1, updates + 1))
    return [before_kill + after_kill[0], resumed]


def test_spawned_world_of_two_resumes_as_update_freq_two(lm_reference, tiny_lm_corpus, tmp_path):
    """The 2 processes of one fairseq-train command follow 1 process with --update-freq 2 at every update,
    before and after the stop, with no Python warning on any rank (torch's, fairseq's, ours). Before the fix,
    the second run died on rank 1: "Unsupported global: ... DictConfig"."""
    args = lambda updates: tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path, *NO_DROPOUT, "--max-update", updates,
                                        "--distributed-world-size", "2", *GLOO)  # fmt: skip
    runs = train(args(STOPPED_AT)), train(args(UPDATES))
    for run in runs:
        assert "distributed init (rank 1)" in run.stdout and python_warnings(run.stdout, run.stderr) == []
    first, resumed = (run.stdout for run in runs)
    assert f"Loaded checkpoint {tmp_path / 'checkpoint_last.pt'} (epoch 1 @ {STOPPED_AT} updates)" in resumed
    assert sorted(logged_updates(first)) == list(range(1, STOPPED_AT + 1))
    assert sorted(logged_updates(resumed)) == list(range(STOPPED_AT + 1, UPDATES + 1))
    assert_same_checkpoints(lm_reference, tmp_path, UPDATES)


def test_a_killed_spawned_rank_ends_the_run_with_one_line(tiny_lm_corpus, tmp_path):
    """SIGKILL of one of the processes fairseq-train spawned: spawn stops the other and the run ends with
    one line naming the checkpoint to resume from (the test above resumes such a run)."""
    args = tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path, "--max-update", 1000, "--distributed-world-size", "2", *GLOO)
    run = start(args, stderr=subprocess.PIPE)
    read_until_update(run, 2)
    spawned_ranks(run)[0].send_signal(signal.SIGKILL)
    stderr = run.communicate(timeout=120)[1]
    assert run.returncode == 1
    last = stderr.strip().splitlines()[-1]
    ended = re.fullmatch(r"fairseq-train: error: process [01] of the run was ended by SIGKILL, and the others stopped: "
                         r"run the same command to resume from update (\d+) \((\S+)\)", last)  # fmt: skip
    assert ended and ended.group(2) == str(tmp_path / "checkpoint_last.pt"), stderr[-3000:]
    assert int(ended.group(1)) >= 1 and "Traceback" not in stderr


def test_a_killed_node_ends_the_mlm_nsp_run_which_then_resumes_as_update_freq_two(bert_reference, tiny_bert_corpus,
                                                                                tmp_path):
    """SIGKILL of node 1's process mid-run: its connections close, node 0's next collective fails at
    once ("Connection closed by peer"), both launchers exit non-zero; the same command then finishes the
    run as 1 process with --update-freq 2 trains it, at every update (MLM+NSP: its data order, sentence
    pairs and masks come back too)."""
    args = tiny_bert_args(tiny_bert_corpus.data_bin, tmp_path, *NO_DROPOUT, "--max-update", UPDATES, *GLOO)
    first, resumed = kill_node_1_then_resume(args, UPDATES)
    assert "distributed init (rank 0): env://" in first and "distributed init (rank 0): env://" in resumed
    assert_same_checkpoints(bert_reference, tmp_path, UPDATES)


def test_a_frozen_node_ends_the_run_after_the_heartbeat_timeout(tiny_lm_corpus, tmp_path):
    """SIGSTOP of node 1's process: its connections stay open, and without the fix node 0 waited in
    its gradient all-reduce for gloo's default timeout, 30 minutes. With --heartbeat-timeout 20 it
    fails after 20 s and node 0 exits non-zero."""
    args = tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path, "--max-update", 1000, "--heartbeat-timeout", 20, *GLOO)
    launchers = start_two_nodes(args)
    read_until_update(launchers[0], 2)  # update 1's checkpoint is written (update 2 follows its save's all-reduce)
    frozen = worker(launchers[1])
    frozen.send_signal(signal.SIGSTOP)
    try:
        node_0 = launchers[0].communicate(timeout=240)[0]
    finally:
        frozen.send_signal(signal.SIGKILL)
        finish(launchers)
    assert launchers[0].returncode == 1
    lost = LOST_PEER_LINE.search(node_0)
    assert lost and lost.group(1) == "Timed out waiting 20000ms", node_0[-3000:]
    assert lost.group(3) == str(tmp_path / "checkpoint_last.pt")

"""The fork server of ``train`` and ``start`` (fork_server.py): a run forked from it prints, saves and exits as a new
fairseq-train process does, and its CPU seconds are counted (tests/cpu_time.py); a started one streams its output and
dies of a signal as a process does."""
import os
import re
import signal
import subprocess
import sys

import pytest

from .fairseq_runs import (UPDATES, command, fork_server, interval_checkpoint, logged_updates, model_weights,
                           tiny_lm_args)
from .fork_server import FORKED_CPU_SECONDS

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ", re.M)


def both(args_of, tmp_path) -> dict:
    """{how: CompletedProcess} of the same command as a new process and forked from the server."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    new = subprocess.run(command(args_of(tmp_path / "process")), env=env, capture_output=True, text=True, timeout=300)
    forked = command(args_of(tmp_path / "forked"))
    return {"process": new, "forked": fork_server(forked, env).run(forked, env, None, 300)}


def printed(result, save_dir) -> list:
    """What the run printed, its timestamps, save directory and timings left out."""
    text = TIMESTAMP.sub("", result.stdout + "\n--- stderr ---\n" + result.stderr).replace(str(save_dir), "SAVE_DIR")
    return [line for line in text.splitlines() if not re.search(r"wall|wps|\bups\b|seconds|\bsecs\b|_time", line)]


def losses(result) -> dict:
    return {update: stats["loss"] for update, stats in logged_updates(result.stdout).items()}


def test_a_forked_run_prints_saves_and_exits_as_a_new_process(tiny_lm_corpus, tmp_path):
    counted = FORKED_CPU_SECONDS[0]
    runs = both(lambda save_dir: tiny_lm_args(tiny_lm_corpus.data_bin, save_dir, "--max-update", UPDATES), tmp_path)
    assert FORKED_CPU_SECONDS[0] > counted
    assert runs["forked"].returncode == runs["process"].returncode == 0
    assert printed(runs["forked"], tmp_path / "forked") == printed(runs["process"], tmp_path / "process")
    assert losses(runs["forked"]) == losses(runs["process"]) != {}
    weights = [model_weights(interval_checkpoint(tmp_path / how, UPDATES)) for how in ("process", "forked")]
    assert weights[0].keys() == weights[1].keys()
    assert all(weights[0][name].equal(weight) for name, weight in weights[1].items())


def test_a_refused_run_exits_with_the_same_line(tiny_lm_corpus, tmp_path):
    runs = both(lambda save_dir: tiny_lm_args(tiny_lm_corpus.data_bin, save_dir, "--cpu-offload"), tmp_path)
    assert runs["forked"].returncode == runs["process"].returncode == 1
    assert runs["forked"].stderr == runs["process"].stderr != ""


PROGRAM = """import sys, time
print("started", sys.argv[1:], __name__, sys.path[0] == sys.prefix, flush=True)
print("to stderr", file=sys.stderr, flush=True)
time.sleep(60)
"""


def test_a_started_program_streams_its_output_and_dies_of_a_signal_as_a_process(tmp_path):
    """``python -P SCRIPT``, as runs/torchrun.py is run, through Popen's interface."""
    (tmp_path / "program.py").write_text(PROGRAM)
    cmd, env = [sys.executable, "-P", str(tmp_path / "program.py"), "a", "b"], dict(os.environ, OMP_NUM_THREADS="1")
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ended = {}
    for how, process in (("process", subprocess.Popen(cmd, env=env, text=True, **pipes)),
                         ("forked", fork_server(cmd, env).start(cmd, env, **pipes))):  # fmt: skip
        printed = process.stdout.readline(), process.stderr.readline()  # then it sleeps
        assert process.poll() is None, how
        process.send_signal(signal.SIGTERM)
        ended[how] = (*printed, *process.communicate(timeout=30), process.returncode)
    assert ended["forked"] == ended["process"] == ("started ['a', 'b'] __main__ False\n", "to stderr\n", "", "", -15)

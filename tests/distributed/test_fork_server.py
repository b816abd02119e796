"""The fork server of ``train`` and ``start`` (fork_server.py): a run forked from it prints, saves and exits as a new
fairseq-train process does, and its CPU seconds are counted (tests/cpu_time.py); a started one streams its output and
dies of a signal as a process does; a forked torchrun's workers end as torch's started ones; a command a script starts
by name is forked and ends as its program."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from .fairseq_runs import (RUN_ENV, UPDATES, command, fork_server, forked_commands, interval_checkpoint,
                           logged_updates, model_weights, tiny_lm_args)
from .fork_server import FORKED_CPU_SECONDS, environment

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ", re.M)


def both(args_of, tmp_path) -> dict:
    """{how: CompletedProcess} of the same command as a new process and forked from the server."""
    env = {**os.environ, **RUN_ENV}  # as train()'s
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
    cmd, env = [sys.executable, "-P", str(tmp_path / "program.py"), "a", "b"], {**os.environ, **RUN_ENV}
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ended = {}
    for how, process in (("process", subprocess.Popen(cmd, env=env, text=True, **pipes)),
                         ("forked", fork_server(cmd, env).start(cmd, env, **pipes))):  # fmt: skip
        printed = process.stdout.readline(), process.stderr.readline()  # then it sleeps
        assert process.poll() is None, how
        process.send_signal(signal.SIGTERM)
        ended[how] = (*printed, *process.communicate(timeout=30), process.returncode)
    assert ended["forked"] == ended["process"] == ("started ['a', 'b'] __main__ False\n", "to stderr\n", "", "", -15)


ENDINGS = """import atexit, sys, threading, time
atexit.register(print, "atexit", flush=True)
threading.Thread(target=lambda: (time.sleep(0.2), print("thread", flush=True))).start()
how = sys.argv[1]
if how == "exit":
    sys.exit("a message")
if how == "error":
    raise ValueError("an error")
if how == "interrupt":
    raise KeyboardInterrupt
"""


def test_a_forked_program_ends_in_each_way_as_a_process(tmp_path):
    """The interpreter's end, without its teardown (``exit_as_the_interpreter``): a thread still running is joined,
    then the atexit handlers; ``sys.exit(MESSAGE)`` prints it and exits 1, an exception's traceback ends in its line and
    exits 1, an uncaught KeyboardInterrupt ends the process by SIGINT; a program that returns exits 0."""
    (tmp_path / "endings.py").write_text(ENDINGS)
    env = {**os.environ, **RUN_ENV}
    for how, (last_line, status) in {"returned": ("", 0), "exit": ("a message", 1), "error": ("ValueError: an error", 1),
                                     "interrupt": ("KeyboardInterrupt", -signal.SIGINT)}.items():  # fmt: skip
        cmd = [sys.executable, str(tmp_path / "endings.py"), how]
        ended = {"process": subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60),
                 "forked": fork_server(cmd, env).run(cmd, env, None, 60)}  # fmt: skip
        for run in ended.values():
            assert (run.stdout, run.stderr.strip().splitlines()[-1:], run.returncode) == (
                "thread\natexit\n", [last_line] if last_line else [], status), (how, run)


WORKER = """import json, os, sys, time
from pathlib import Path
out = Path(sys.argv[1])
(out / f"rank{os.environ['RANK']}.json").write_text(json.dumps([os.getpid(), "fairseq_cli.train" in sys.modules]))
while not (out / "go").exists():
    time.sleep(0.05)
print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], __name__, flush=True)
sys.exit(3 if os.environ["RANK"] == "1" else 0)
"""


@pytest.mark.parametrize("how", ["process", "forked"])
def test_a_forked_torchruns_workers_are_forked_and_end_as_started_ones(how, tmp_path):
    """torchrun's workers (``python -u SCRIPT``): forked by a forked torchrun (they have the server's imports), children
    of it with their own environment (``environment``), printing and exiting as torch's started ones."""
    (tmp_path / "worker.py").write_text(WORKER)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd, env = [*torchrun, str(tmp_path / "worker.py"), str(tmp_path)], {**os.environ, **RUN_ENV}
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if how == "forked":
        launcher = fork_server(cmd, env).start(cmd, env, **pipes)
    else:
        launcher = subprocess.Popen(cmd, env=env, text=True, **pipes)
    recorded = {rank: tmp_path / f"rank{rank}.json" for rank in (0, 1)}
    while not all(path.exists() for path in recorded.values()) and launcher.poll() is None:
        time.sleep(0.05)
    workers = {rank: json.loads(path.read_text()) for rank, path in recorded.items()}
    for rank, (pid, _) in workers.items():
        assert psutil.Process(pid).ppid() == launcher.pid
        assert environment(pid)["RANK"] == str(rank) and environment(pid)["WORLD_SIZE"] == "2"
    assert {preloaded for _, preloaded in workers.values()} == {how == "forked"}
    (tmp_path / "go").touch()
    stdout, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 1
    assert sorted(stdout.splitlines()) == ["rank 0 of 2 __main__", "rank 1 of 2 __main__"]
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)\s+exitcode\s*: 3", stderr), stderr


COMMAND = """import os, sys, time
print(os.getpid(), sys.argv[1:], os.path.basename(sys.executable), "fairseq_cli.train" in sys.modules, flush=True)
print(sys.stdin.readline().strip(), os.environ["ASKED"], file=sys.stderr, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_command_on_path_is_forked_and_ends_as_its_program(signum, tmp_path):
    """``python SCRIPT`` by name in a script's environment (``forked_commands``): forked by the server with its
    arguments, environment, stdin, stdout and stderr; SIGTERM to the command ends the run with it, and so does
    SIGKILL, which the command cannot forward."""
    (tmp_path / "command.py").write_text(COMMAND)
    env = forked_commands({**os.environ, **RUN_ENV, "ASKED": "yes"})
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    command = subprocess.Popen(["python", str(tmp_path / "command.py"), "a"], env=env, text=True, **pipes)
    command.stdin.write("read\n"), command.stdin.flush()
    pid, argv, executable, preloaded = command.stdout.readline().split()
    assert (argv, executable, preloaded) == ("['a']", "python", "True")
    assert command.stderr.readline() == "read yes\n"
    run = psutil.Process(int(pid))
    assert run.pid != command.pid and run.ppid() != command.pid  # forked by the server, not started by the command
    command.send_signal(signum)
    assert command.wait(timeout=30) == -signum
    run.wait(timeout=30)  # ended with it, else psutil.TimeoutExpired

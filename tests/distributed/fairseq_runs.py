"""Running fairseq-train on the tiny corpora, and reading back what it logged and saved."""
import atexit
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch

from fairseq_normformer.cli import script

from ..conftest import USER_DIR, python_warnings, run_cli
from .fork_server import ForkServer, import_time, program

BIN = Path(script("fairseq-train")).parent
UPDATES = 4  # of the 1-process references (lm_reference, bert_reference in conftest.py) and the runs compared with them
RUN_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}  # of every run here: one thread (2 cores), unbuffered
NO_DROPOUT = ["--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0"]
SHARDED = ["--distributed-world-size", "2", "--distributed-backend", "gloo", "--ddp-backend", "fully_sharded"]


def tiny_lm_args(data_bin, save_dir, *extra) -> list:
    """A 2-layer NormFormer LM (dim 32) that saves a checkpoint after every update."""
    return [
        data_bin, "--user-dir", USER_DIR, "--task", "language_modeling", "--arch", "normformer_lm",
        "--scale-attn", "--scale-fc", "--scale-heads", "--decoder-layers", "2", "--decoder-embed-dim", "32",
        "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4", "--tokens-per-sample", "32",
        "--criterion", "cross_entropy", *common_args(save_dir), *extra,
    ]  # fmt: skip


def tiny_bert_args(data_bin, save_dir, *extra) -> list:
    """A 2-layer NormFormer BERT (dim 32) trained on masked LM + next-sentence prediction."""
    return [
        data_bin, "--user-dir", USER_DIR, "--task", "mlm_nsp", "--criterion", "mlm_nsp",
        "--arch", "normformer_bert_base", "--encoder-layers", "2", "--encoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4", "--tokens-per-sample", "32",
        *common_args(save_dir), *extra,
    ]  # fmt: skip


def common_args(save_dir) -> list:
    return [
        "--batch-size", "4", "--optimizer", "adam", "--lr", "1e-3", "--num-workers", "0", "--cpu",
        "--log-format", "json", "--log-interval", "1", "--no-progress-bar", "--disable-validation",
        "--save-dir", save_dir, "--save-interval-updates", "1", "--no-epoch-checkpoints", "--seed", "7",
    ]  # fmt: skip


def command(args, launcher=()) -> list:
    """``fairseq-train args``, optionally behind a launcher such as torchrun's arguments."""
    return [str(a) for a in [*launcher, BIN / "fairseq-train", *args]]


def train(args, launcher=(), check=True, **env) -> subprocess.CompletedProcess:
    """Run fairseq-train (behind ``launcher``) to the end, with ``env`` added; one thread per process (the test machine
    has 2 cores), unbuffered as torchrun's workers. The process (the launcher and its workers, with one) is forked from
    a server that has imported torch and fairseq (fork_server.py)."""
    env, cmd = {**os.environ, **RUN_ENV, **env}, command(args, launcher)
    server = fork_server(cmd, env)
    if server:
        result = server.run(cmd, env, cwd=None, timeout=300)
    else:
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def start(args, launcher=(), stderr=subprocess.STDOUT, **env):
    """fairseq-train (behind ``launcher``) started: ``start_program``."""
    return start_program(command(args, launcher), stderr=stderr, **env)


def start_program(cmd, cwd=None, stderr=subprocess.STDOUT, **env):
    """``cmd`` started as ``subprocess.Popen`` with its output unbuffered to a pipe (stderr to the same one, or its
    own: PIPE), ``env`` added and one thread; forked as in ``train``."""
    env = {**os.environ, **RUN_ENV, **env}
    server = fork_server(cmd, env)
    if server:
        return server.start(cmd, env, cwd, subprocess.PIPE, stderr)
    return subprocess.Popen(cmd, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=stderr)


def fork_server(cmd, env):
    """This test process's server for ``env`` (``server_for``), or None if it cannot run ``cmd``."""
    return server_for(env) if program(cmd) is not None else None


def server_for(env: dict):
    """This test process's server for the ``import_time`` part of ``env`` (one per part), or None if it ended."""
    key = import_time(env)
    if key not in SERVERS:
        SERVERS[key] = ForkServer(env)
        atexit.register(SERVERS[key].close)
    return SERVERS[key] if SERVERS[key].serves(env) else None


def forked_commands(env: dict) -> dict:
    """``env`` where the Python programs a script or program starts by name (python, fairseq-train, torchrun, ...) are
    forked from this test process's server when they can be (fork_server.py ``ForkServer.commands``)."""
    server = server_for(env)
    return server.commands(env) if server else env


@contextlib.contextmanager
def forked_subprocesses(**env):
    """In this test process, while in the block: what the code under test starts as ``sys.executable``, a console
    script beside it or a command by name is forked (``forked_commands`` of this environment with ``env``: both
    set here for the block, ``sys.executable`` its PY; with no server, they start as they are)."""
    commands = forked_commands({**os.environ, **env})
    with pytest.MonkeyPatch.context() as patch:
        for key, value in commands.items():
            patch.setenv(key, value)
        if "FORK_SERVER" in commands:
            patch.setattr(sys, "executable", commands["PY"])
        yield


SERVERS = {}


def train_in_process(args, check=True):
    """fairseq-train in this process (tests/conftest.py run_cli), for a run of one rank whose process the test is
    not about: no start-up of torch and fairseq; one thread, as ``train``'s processes."""
    return run_cli(["fairseq-train", *args], check=check, env={"OMP_NUM_THREADS": "1"})


def train_one_rank_here(args):
    """fairseq-train: in this process (train_in_process) when it trains one rank, else a process that spawns its ranks."""
    return train(args) if "--distributed-world-size" in args else train_in_process(args)


def spawned_ranks(parent) -> list:
    """The rank processes a fairseq-train on CPU forked (fixes/distributed.py spawn_ranks), rank 0 first."""
    return sorted(psutil.Process(parent.pid).children(), key=lambda child: child.create_time())


def logged_updates(stdout: str) -> dict:
    """{update: {stat: value}} of the ``--log-format json --log-interval 1`` lines of a run."""
    updates = {}
    for line in stdout.splitlines():
        if "| train_inner | " in line:
            stats = json.loads(line.split("| train_inner | ", 1)[1])
            updates[int(stats["num_updates"])] = stats
    return updates


def one_process_run(args, save_dir):
    """The reference: 1 process, --update-freq 2; no Python warning printed."""
    result = train(args + ["--update-freq", "2"])
    log = result.stdout
    assert "distributed init" not in log and python_warnings(result.stdout, result.stderr) == []
    for update, stats in logged_updates(log).items():  # the checkpoints hold the losses the log prints
        unrounded = logged_loss(interval_checkpoint(save_dir, update))
        assert float(stats["loss"]) == pytest.approx(unrounded, abs=5e-4)
    return save_dir


def warning_free_run(args, save_dir):
    """A run of UPDATES updates, every one logged, no Python warning printed (fairscale's TypedStorage filtered)."""
    result = train(args)
    assert sorted(logged_updates(result.stdout)) == list(range(1, UPDATES + 1)), save_dir
    assert python_warnings(result.stdout, result.stderr) == [], save_dir
    return save_dir


def interval_checkpoint(save_dir, update: int) -> Path:
    return Path(save_dir) / f"checkpoint_1_{update}.pt"


def logged_loss(checkpoint) -> float:
    """The loss fairseq logged for the checkpoint's last update, unrounded: the ``val`` of its
    'train' meter, which the JSON log prints rounded to 3 decimals."""
    meters = torch.load(checkpoint, map_location="cpu")["extra_state"]["metrics"]["train"]
    return next(float(state["val"]) for _, name, _, state in meters if name == "loss")


def model_weights(checkpoint) -> dict:
    return torch.load(checkpoint, map_location="cpu")["model"]

"""examples/slurm: the multi-node launch scripts build fairseq-train commands that fairseq accepts
and that train with the paper's batch: 0.5M tokens per update for 125M and 355M, 1M above, 300B
tokens in all (the authors' fairseq script: 572,204 and 286,102 updates)."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fairseq import options

from ..conftest import REPO_ROOT, USER_DIR

HALF_MILLION, MILLION = 1024 * 1024 // 2, 1024 * 1024
AUTHORS_UPDATES = {HALF_MILLION: 572204, MILLION: 286102}


def dry_run(script, env) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = dict(os.environ, DRY_RUN="1", LR="1e-3", USER_DIR=str(USER_DIR), PATH=path, **env)
    return subprocess.run(["bash", f"examples/slurm/{script}", "/data-bin", "/checkpoints", "--seed", "3"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip


def fairseq_train_args(command_line: str):
    words = shlex.split(command_line)
    args = words[next(i for i, w in enumerate(words) if w.endswith("fairseq-train")) + 1 :]
    return options.parse_args_and_arch(options.get_training_parser(), args)


def slurm(nodes, **env):
    return dict(env, SLURM_NNODES=str(nodes), SLURM_NTASKS_PER_NODE="8")


def torchrun_nodes(nodes, **env):
    return dict(env, NNODES=str(nodes), NODE_RANK="1", MASTER_ADDR="node0")


@pytest.mark.parametrize(
    "script, env, world_size, tokens",
    [
        ("train_lm.sbatch", slurm(2, ARCH="normformer_lm_gpt3_small"), 16, HALF_MILLION),
        ("train_lm.sbatch", slurm(1, ARCH="preln_lm_gpt3_medium", BATCH_SIZE="4"), 8, HALF_MILLION),
        ("train_lm_torchrun.sh", torchrun_nodes(4, ARCH="normformer_lm_gpt3_xl", BATCH_SIZE="4"), 32, MILLION),
        ("train_lm_torchrun.sh", torchrun_nodes(8, ARCH="normformer_lm_gpt3_2_7", BATCH_SIZE="2"), 64, MILLION),
    ],
)
def test_launch_scripts_train_with_the_papers_batch(script, env, world_size, tokens):
    result = dry_run(script, env)
    assert result.returncode == 0, result.stderr
    command_line = result.stdout.strip()
    args = fairseq_train_args(command_line)
    if script == "train_lm.sbatch":
        assert command_line.startswith("srun ") and args.distributed_world_size == world_size
        assert args.distributed_port > 0  # all tasks must agree on the rendezvous port
    else:
        words = shlex.split(command_line)
        assert words[0] == "torchrun"
        value = lambda flag: int(words[words.index(flag) + 1])
        assert value("--nnodes") * value("--nproc-per-node") == world_size
    assert args.arch == env["ARCH"] and args.memory_efficient_fp16
    assert world_size * args.batch_size * args.tokens_per_sample * args.update_freq[0] == tokens
    assert args.max_update == float(args.total_num_update) == AUTHORS_UPDATES[tokens]
    assert f"= {tokens}" in result.stderr  # the arithmetic is printed


def test_a_batch_that_cannot_reach_the_papers_is_refused():
    result = dry_run("train_lm.sbatch", slurm(3, ARCH="normformer_lm_gpt3_small"))
    assert result.returncode != 0
    assert "24 GPUs x --batch-size 16 x 2048 tokens does not divide 524288 tokens" in result.stderr

"""fairseq_normformer/paper.py is the one source of the paper's settings: its batch arithmetic on
explicit cases, and every recipe and launch script that trains a (table, size, model) prints the
module's settings, read back with fairseq's own parser."""
import os
import shlex
import subprocess
import sys

import pytest
from fairseq import options

from fairseq_normformer import checks, paper
from tests.conftest import REPO_ROOT, USER_DIR, fairseq_config, recorded_command
from tests.distributed.fairseq_runs import forked_commands

PY = {"PY": sys.executable, "PYTHONPATH": f"{REPO_ROOT}:{os.environ.get('PYTHONPATH', '')}"}


@pytest.mark.parametrize("world, batch, tokens_per_sample, target, expected", [
    (16, 16, 2048, 524_288, 1),  # 16 GPUs x 16 x 2048 x 1 = 524,288
    (32, 4, 2048, 1_048_576, 4),  # 32 x 4 x 2048 x 4 = 1,048,576
    (8, 4, 2048, 1_048_576, 16),  # the authors' 1.3B command
])  # fmt: skip
def test_update_freq_reaches_the_tokens_per_update_exactly(world, batch, tokens_per_sample, target, expected):
    freq = paper.update_freq(target, world, batch, tokens_per_sample)
    assert freq == expected and world * batch * tokens_per_sample * freq == target


@pytest.mark.slow
def test_an_impossible_batch_is_an_error_naming_the_numbers():
    with pytest.raises(ValueError, match="24 GPUs x --batch-size 16 x 2048 tokens does not divide 524288 tokens"):
        paper.update_freq(524_288, 24, 16, 2048)
    with pytest.raises(ValueError, match="batch size must be at least 1"):
        paper.update_freq(524_288, 8, 0, 2048)
    result = subprocess.run([sys.executable, "-m", "fairseq_normformer.paper", "--table", "6", "--size", "125M",
                             "--world-size", "3"], capture_output=True, text=True, env={**os.environ, **PY})  # fmt: skip
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1].startswith("normformer-paper-settings: error: 3 GPUs x")


def test_the_module_holds_the_authors_commands():
    s = paper.settings("6", "355M", "baseline", world_size=8)
    assert (s["arch"], s["lrs"], s["dropout"], s["update_freq"], s["max_update"]) == ("preln_lm_gpt3_medium", [6e-4], 0.0, 2, 572204)
    s = paper.settings("6", "gpt3_xl", "normformer", world_size=8)  # preset names work too
    assert (s["size"], s["lrs"], s["batch_size"], s["update_freq"], s["max_update"]) == ("1.3B", [6e-4], 4, 16, 286102)
    assert [paper.lr_text(x) for x in (6e-4, 1.6e-4, 3e-3, 0.05)] == ["6e-4", "1.6e-4", "3e-3", "5e-2"]


def train_settings(argv) -> tuple:
    """(lr, dropout, tokens per update, update freq, warmup, betas) of a fairseq-train command."""
    a = options.parse_args_and_arch(options.get_training_parser(), argv)
    tokens = a.distributed_world_size * a.batch_size * a.tokens_per_sample * a.update_freq[0]
    return a.arch, a.lr[0], a.dropout, a.attention_dropout, tokens, a.update_freq[0], a.warmup_updates, a.adam_betas


def expected(table, size, model, world):
    s = paper.settings(table, size, model, world)
    return (s["arch"], s["lrs"][0], s["dropout"], s["dropout"], s["tokens_per_update"], s["update_freq"],
            s["warmup_updates"], str(tuple(s["adam_betas"])))  # fmt: skip


def train_lines(text):
    words = [recorded_command(line)[0] for line in text.splitlines()]
    return [w[w.index(next(x for x in w if x.endswith("fairseq-train"))) + 1 :] for w in words
            if any(x.endswith("fairseq-train") for x in w)]  # fmt: skip


def recipe_dry_run(recipe, out, **env):
    env = {**os.environ, **PY, "DRY_RUN": "1", "DATA_BIN": "/data", "SPM_MODEL": "/spm",
           "TASK_DIR": "/tasks", **env}  # fmt: skip
    result = subprocess.run(["bash", REPO_ROOT / "recipes" / f"{recipe}.sh", "paper", out], env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return train_lines(result.stdout)


def launch_dry_run(script, arch, world):
    env = {**os.environ, **PY, "DRY_RUN": "1", "ARCH": arch, "USER_DIR": str(USER_DIR), "SLURM_NNODES": str(world // 8),
           "SLURM_NTASKS_PER_NODE": "8", "NODE_RANK": "0", "MASTER_ADDR": "node0",
           "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env = forked_commands(env)  # PY: the forked one
    result = subprocess.run(["bash", f"examples/slurm/{script}", "/data", "/save"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return train_lines(result.stdout)


@pytest.mark.slow
def test_tables_1_and_6_and_the_launch_scripts_print_the_modules_settings(tmp_path):
    """Every (size, model) of Tables 1 and 6; the launch script of each size (sbatch for 0.5M tokens per
    update, torchrun for 1M) with one model, the baseline and NormFormer in turn."""
    world = 16
    table6 = recipe_dry_run("table6_sizes", tmp_path / "t6", WORLD_SIZE=str(world), DATA="/data")
    table1 = recipe_dry_run("table1_zero_shot", tmp_path / "t1", WORLD_SIZE=str(world))
    sizes = [(size, model) for size in paper.TABLES["6"]["sizes"] for model in paper.MODELS]
    assert len(table6) == len(table1) == len(sizes)
    for i, ((size, model), argv6, argv1) in enumerate(zip(sizes, table6, table1)):
        want = expected("6", size, model, world)
        assert train_settings(argv6) == train_settings(argv1) == want, (size, model)
        if i % 3 == 0:  # 125M baseline, 355M NormFormer, 2.7B baseline
            script = "train_lm.sbatch" if paper.TOKENS_PER_UPDATE[size] == 2**19 else "train_lm_torchrun.sh"
            (launch,) = launch_dry_run(script, want[0], world)
            assert train_settings(launch) == want, (script, size, model)
    assert expected("1", "355M", "baseline", world) == expected("6", "355M", "baseline", world)


def distributed_config(precision):
    """fairseq-train's distributed_training config of a 1.3B run with ``precision``."""
    argv = ["/data", "--task", "language_modeling", "--arch", "normformer_lm_gpt3_xl", "--user-dir", str(USER_DIR), *precision]
    return fairseq_config(options.parse_args_and_arch(options.get_training_parser(), argv)).distributed_training


def test_fully_sharded_runs_get_the_precision_fsdp_accepts(capsys):
    """The paper's --memory-efficient-fp16 is refused under --ddp-backend fully_sharded; --fully-sharded
    prints FSDP with --fp16 (the same loss scale), which is accepted."""
    paper.main(["--table", "6", "--size", "1.3B", "--model", "normformer", "--fully-sharded", "--format", "shell"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("PAPER_PRECISION="))
    precision = shlex.split(line[len("PAPER_PRECISION=(") : -1])
    assert precision == ["--ddp-backend", "fully_sharded", "--fp16", "--fp16-init-scale", "4"]
    checks.check_fully_sharded(distributed_config(precision))
    with pytest.raises(ValueError, match="--memory-efficient-fp16 does not work with --ddp-backend fully_sharded"):
        checks.check_fully_sharded(distributed_config([*paper.PRECISION, "--ddp-backend", "fully_sharded"]))

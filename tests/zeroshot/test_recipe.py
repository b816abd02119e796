"""recipes/table1_zero_shot.sh at paper scale, printed (DRY_RUN=1): the paper's presets, learning
rates, and the update frequency and number of updates that reach its tokens per update and total."""
import math
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

RECIPE = REPO_ROOT / "recipes" / "table1_zero_shot.sh"


def flag(command, name):
    return re.search(rf"{name} (\S+)", command).group(1)


def test_paper_scale_commands(tmp_path):
    world, batch, tokens_per_sample, total = 16, 4, 2048, 300 * 10**9
    env = dict(os.environ, DRY_RUN="1", DATA_BIN="/data", SPM_MODEL="/spm.model", TASK_DIR="/tasks",
               SIZES="gpt3_small gpt3_xl", WORLD_SIZE=str(world), BATCH_SIZE=str(batch), PY=sys.executable)  # fmt: skip
    result = subprocess.run(["bash", RECIPE, "paper", tmp_path], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    trains = [line for line in result.stdout.splitlines() if "fairseq-train" in line]
    scores = [line for line in result.stdout.splitlines() if "normformer-zero-shot score" in line]
    assert [flag(t, "--arch") for t in trains] == [
        "preln_lm_gpt3_small", "normformer_lm_gpt3_small", "preln_lm_gpt3_xl", "normformer_lm_gpt3_xl"
    ]  # fmt: skip
    # paper: 125M baseline 6e-4, NormFormer 3e-3; 1.3B baseline 2e-4, NormFormer 6e-4
    assert [flag(t, "--lr") for t in trains] == ["6e-4", "3e-3", "2e-4", "6e-4"]
    for train, batch_tokens in zip(trains, [2**19, 2**19, 2**20, 2**20]):  # 0.5M, then 1M tokens per update
        update_freq = math.ceil(batch_tokens / (tokens_per_sample * batch * world))
        assert int(flag(train, "--update-freq")) == update_freq
        assert int(flag(train, "--max-update")) == total // (tokens_per_sample * batch * world * update_freq)
        assert flag(train, "--distributed-world-size") == str(world) and "--fp16" in train
    assert all(f"--checkpoint {tmp_path}/{flag(t, '--arch')}/checkpoint_last.pt" in s for t, s in zip(trains, scores))
    assert "normformer-zero-shot table" in result.stdout and f"--output {tmp_path}/table1.md" in result.stdout


def test_paper_scale_needs_the_data(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_BIN", "SPM_MODEL", "TASK_DIR")}
    env.update(DRY_RUN="1", PY=sys.executable)
    result = subprocess.run(["bash", RECIPE, "paper", tmp_path], env=env, capture_output=True, text=True)
    assert result.returncode != 0 and "set DATA_BIN" in result.stderr

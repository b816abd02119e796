"""fairseq-eval-lm throughput of the variants, from checkpoints that fairseq-train itself writes."""
import logging
import subprocess
import time
from pathlib import Path

import torch
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli import eval_lm

from fairseq_normformer.analysis.training_log import read_eval_lm_speed
from fairseq_normformer.cli import script

from .measure import rotations
from .variants import Setup, Variant, layer_operations

REPO_ROOT = Path(__file__).resolve().parent.parent
USER_DIR = REPO_ROOT / "fairseq_normformer"


def _device_flags(device: str) -> list:
    return ["--cpu"] if device == "cpu" else ["--fp16"]


def train_one_update(variant: Variant, setup: Setup, data_dir: Path, save_dir: Path, device: str) -> Path:
    """A checkpoint of ``variant`` written by fairseq-train itself (one update), from scratch: a
    checkpoint an earlier run left in ``save_dir`` is removed first (fairseq-train would resume it)."""
    (save_dir / "checkpoint_last.pt").unlink(missing_ok=True)
    cmd = [script("fairseq-train")] + [str(a) for a in [
        data_dir, "--user-dir", USER_DIR, "--task", "language_modeling", "--arch", setup.arch(variant),
        *setup.shape_flags, *variant.flags, "--tokens-per-sample", setup.seq_len, "--max-tokens", 2048,
        "--max-update", 1, "--optimizer", "adam", "--lr", "1e-4", "--save-dir", save_dir, "--num-workers", 0,
        "--disable-validation", "--no-epoch-checkpoints", *_device_flags(device),
    ]]  # fmt: skip
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return save_dir / "checkpoint_last.pt"


def eval_lm_tokens_per_second(checkpoint: Path, data_dir: Path, setup: Setup, device: str, log: Path) -> dict:
    """fairseq-eval-lm's main, run in this process as its console script runs it, its log written to
    ``log``. {"wall": the tokens/s it reports (its own stopwatch), "cpu": tokens per CPU second of this
    process over the whole run (model loading included)}."""
    argv = [str(a) for a in [
        data_dir, "--path", checkpoint, "--gen-subset", "valid", "--tokens-per-sample", setup.seq_len,
        "--max-tokens", setup.tokens, "--num-workers", 0, *_device_flags(device),
    ]]  # fmt: skip
    args = options.parse_args_and_arch(options.get_eval_lm_parser(), argv)
    handler, logger = logging.FileHandler(log, mode="w"), logging.getLogger(eval_lm.__name__)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        cpu = time.process_time()
        eval_lm.main(convert_namespace_to_omegaconf(args))
        cpu = time.process_time() - cpu
    finally:
        logger.removeHandler(handler)
        handler.close()
    speed = read_eval_lm_speed(log)
    speeds = {"wall": speed["tokens_per_second"], "cpu": speed["tokens"] / cpu}
    return {clock: value for clock, value in speeds.items() if clock == "wall" or device == "cpu"}


def eval_lm_throughput(variants: list, setup: Setup, data_dir: Path, workdir: Path, device: str, rounds: int):
    """{"runs": {name: [{clock: tokens/s} of each round]}, "fairseq_train_drops_scale_flags": bool}."""
    checkpoints = {v.name: train_one_update(v, setup, data_dir, workdir / f"ckpt_{v.name}", device) for v in variants}
    runs = {name: [] for name in checkpoints}
    for r, order in rotations(list(checkpoints), rounds):
        for name in order:
            log = workdir / f"eval_lm_{name}.log"
            runs[name].append(eval_lm_tokens_per_second(checkpoints[name], data_dir, setup, device, log))
        print(f"eval-lm round {r + 1}/{rounds} (tokens/s): {runs}", flush=True)
    drops = "fairseq_scale_flags" in checkpoints and _lost_scale_flags(checkpoints["fairseq_scale_flags"])
    return {"runs": runs, "fairseq_train_drops_scale_flags": drops}


def _lost_scale_flags(checkpoint: Path) -> bool:
    """True when fairseq-train's checkpoint has no NormFormer parameters (its --scale-* flags were lost)."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    return not any(layer_operations(state["model"], fairseq=True).values())

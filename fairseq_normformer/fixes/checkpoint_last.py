"""An unreadable checkpoint_last: moved aside, and the run resumes from the newest intact checkpoint.

fairseq resumes from the save dir's checkpoint_last. When that file cannot be read (a disk or copy
fault, a full file system: truncated, empty, random bytes), fairseq stops with torch's traceback,
which advises loading with weights_only=False, and a requeued preempted job waits for a person while
an intact checkpoint_E_U.pt sits beside it. Here, when fairseq-train would resume from its own
checkpoint_last (the default --restore-file), a damaged one is renamed to checkpoint_last.pt.corrupt
and the newest intact checkpoint of the save dir (by modification time) is loaded as --restore-file
would load it: weights, optimizer, data position. With sharded checkpoints (--use-sharded-state) a
checkpoint is intact when every rank's shard of it is. When none is intact nothing is moved and the
run stops with one line. An explicit --restore-file is never replaced: the user named it.
"""
import copy
import glob
import os
import sys

import torch
from fairseq.distributed import utils as distributed_utils
from fairseq.file_io import PathManager

from ..checks import BadInput
from . import optimizer_state
from .checkpoints import checkpoint_checks_on, checkpoint_damage

LAST = "checkpoint_last"


def suffixes(trainer) -> list:
    """The suffixes of one checkpoint's files: every rank's shard with --use-sharded-state, else one."""
    dist_cfg = trainer.cfg.distributed_training
    if trainer.is_fsdp and dist_cfg.use_sharded_state:
        base = trainer.cfg.checkpoint.checkpoint_suffix
        return [f"{base}-shard{rank}" for rank in range(trainer.data_parallel_world_size)]
    return [trainer.checkpoint_suffix]


def damage(save_dir: str, name: str, file_suffixes: list):
    """What is wrong with checkpoint ``name`` (every shard of it), or None when it is intact."""
    for suffix in file_suffixes:
        path = os.path.join(save_dir, f"{name}{suffix}.pt")
        problem = checkpoint_damage(path) if os.path.isfile(path) else "a shard is missing"
        if problem:
            return f"{os.path.basename(path)}: {problem}"
    return None


def newest_intact(save_dir: str, file_suffixes: list):
    """The name (without suffix and .pt) of the newest intact checkpoint of ``save_dir`` but checkpoint_last."""
    first = file_suffixes[0]
    paths = glob.glob(os.path.join(glob.escape(save_dir), f"checkpoint*{first}.pt"))
    names = {os.path.basename(path)[: -len(f"{first}.pt")]: os.path.getmtime(path) for path in paths}
    names.pop(LAST, None)
    for name in sorted(names, key=lambda name: (names[name], name), reverse=True):
        if damage(save_dir, name, file_suffixes) is None:
            return name
    return None


def move_aside(save_dir: str, file_suffixes: list) -> str:
    """checkpoint_last{suffix}.pt renamed to ….pt.corrupt (….corrupt2, … when that exists); the first new name."""
    moved = []
    for suffix in file_suffixes:
        path = os.path.join(save_dir, f"{LAST}{suffix}.pt")
        if os.path.exists(path):
            target, n = f"{path}.corrupt", 1
            while os.path.exists(target):
                n += 1
                target = f"{path}.corrupt{n}"
            os.replace(path, target)
            moved.append(target)
    return moved[0]


def load_checkpoint(cfg, trainer, **passthrough_args):
    """fairseq's resume (with the optimizer state by name: optimizer_state.py), from the newest intact
    checkpoint when the save dir's checkpoint_last cannot be read."""
    if cfg.restore_file == "checkpoint_last.pt" and isinstance(cfg.save_dir, str) and checkpoint_checks_on():
        last = os.path.join(cfg.save_dir, f"{LAST}{trainer.checkpoint_suffix}.pt")  # as fairseq's load_checkpoint
        if PathManager.exists(last) and not PathManager.path_requires_pathmanager(last):
            file_suffixes = suffixes(trainer)
            problem = damage(cfg.save_dir, LAST, file_suffixes)
            if problem:
                cfg = resume_instead(cfg, problem, file_suffixes)
    return optimizer_state.load_checkpoint(cfg, trainer, **passthrough_args)


def resume_instead(cfg, problem: str, file_suffixes: list):
    """``cfg`` with --restore-file the newest intact checkpoint, checkpoint_last moved aside (by rank 0,
    once every rank has chosen); or one line when there is none."""
    fallback = newest_intact(cfg.save_dir, file_suffixes)
    if fallback is None:
        raise BadInput(
            f"{os.path.join(cfg.save_dir, LAST)}.pt cannot be read ({problem}) and no other checkpoint in "
            f"{cfg.save_dir} is intact: it was left as it is; resume from a copy with --restore-file, or move it away"
        )
    if torch.distributed.is_initialized():
        torch.distributed.barrier(distributed_utils.get_global_group())  # every rank chose before the move
    if distributed_utils.get_global_rank() == 0:
        moved = move_aside(cfg.save_dir, file_suffixes)
        print(f"{os.path.basename(sys.argv[0])}: {LAST}.pt cannot be read ({problem}): moved to {moved}; "
              f"resuming from {os.path.join(cfg.save_dir, fallback)}.pt", file=sys.stderr, flush=True)  # fmt: skip
    cfg = copy.deepcopy(cfg)
    cfg.restore_file = os.path.join(cfg.save_dir, f"{fallback}.pt")  # fairseq adds each rank's suffix
    cfg.finetune_from_model = None  # only read at a first launch, which this is not
    return cfg

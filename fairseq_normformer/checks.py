"""Checks of a fairseq command line, run before anything is built or written.

Each check raises ValueError with a message that names the problem and the fix, instead of the
traceback (or the silent misbehaviour) fairseq would produce later. They run from every fairseq
CLI entry point (``call_main``, see patches/cpu_training.py) and reject only what cannot work.
"""
import os

from fairseq.tasks import TASK_REGISTRY
from fairseq.tasks.language_modeling import LanguageModelingTask
from fairseq.tasks.masked_lm import MaskedLMTask

from .tasks.mlm_nsp import MlmNspTask

# Tasks whose setup reads <first data directory>/dict.txt.
DICTIONARY_TASKS = (LanguageModelingTask, MaskedLMTask, MlmNspTask)


def check_config(cfg, on_cpu: bool) -> None:
    check_data_dirs(cfg.task)
    check_precision(cfg.common, on_cpu)
    check_distributed_backend(cfg.distributed_training, on_cpu)


def check_data_dirs(task_cfg) -> None:
    data = task_cfg.get("data") if task_cfg is not None else None
    if not data or "://" in data:  # remote paths are fairseq's PathManager's business
        return
    paths = data.split(os.pathsep)
    for path in paths:
        if not os.path.isdir(path):
            raise ValueError(f"data directory {path!r} does not exist")
    task_cls = TASK_REGISTRY.get(task_cfg.get("_name"))
    dictionary = os.path.join(paths[0], "dict.txt")
    if task_cls is not None and issubclass(task_cls, DICTIONARY_TASKS) and not os.path.isfile(dictionary):
        raise ValueError(
            f"data directory {paths[0]!r} has no dictionary (dict.txt): it is not a binarized "
            "data directory; build one with normformer-build-corpus or fairseq-preprocess"
        )


def check_precision(common_cfg, on_cpu: bool) -> None:
    if on_cpu and common_cfg.amp:
        raise ValueError(
            "--amp uses CUDA autocast, which does nothing on CPU (training would silently run in "
            "fp32): drop --amp, or use --bf16 for bfloat16 training on CPU"
        )


def check_distributed_backend(dist_cfg, on_cpu: bool) -> None:
    world_size = int(os.environ.get("WORLD_SIZE", dist_cfg.distributed_world_size))
    if on_cpu and world_size > 1 and dist_cfg.distributed_backend == "nccl":
        raise ValueError(
            "--distributed-backend nccl (fairseq's default) needs CUDA GPUs: "
            "pass --distributed-backend gloo to train on CPU"
        )

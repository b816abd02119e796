"""Data-parallel and mixed-precision training on CPU.

fairseq 0.12 assumes CUDA devices in the places fixed here. Each fix acts only where fairseq
itself would fail or misbehave without CUDA (a machine without CUDA devices, a module on CPU, or
``--cpu``); on GPUs every function below hands over to fairseq's own code unchanged.
"""
import inspect
import logging
import os
import random

import torch
from fairseq.distributed import utils as distributed_utils
from fairseq.logging import metrics
from fairseq.models import distributed_fairseq_model
from fairseq.trainer import Trainer
from omegaconf import DictConfig

from .. import checks
from . import save_on_signal
from .checkpoints import checkpoint_checks_on
from .distributed import spawn_ranks

logger = logging.getLogger(__name__)

_fairseq_call_main = distributed_utils.call_main
_TorchDDP = torch.nn.parallel.DistributedDataParallel
DDP_HAS_FORWARD_SYNC_BUFFERS = "forward_sync_buffers" in inspect.signature(_TorchDDP).parameters  # torch >= 2.13
_fairseq_train_step = Trainer.train_step


def trains_on_cpu(common_cfg) -> bool:
    """Where fairseq's Trainer puts the model: a TPU with --tpu (and torch_xla), else CUDA when
    available and not --cpu, else the CPU."""
    if common_cfg.tpu and distributed_utils.xm is not None:
        return False
    return common_cfg.cpu or not torch.cuda.is_available()


def use_cpu_precision_paths(cfg) -> None:
    """Fixes two fairseq bugs for --bf16/--fp16 on CPU (on CUDA fairseq's settings stay):
    - options.py turns --bf16 into --tpu (bf16 was TPU-only when written), so a CPU run asks
      torch_xla for a device and dies; with no TPU library installed, a CPU run is not a TPU run
      (``tpu`` is reset in every section that copied it: common, distributed, task, model, optimizer).
    - FP16Optimizer's flat fp32 master copy is keyed by torch.cuda.current_device() and dies
      without CUDA; fairseq's own --fp16-no-flatten-grads path keeps one fp32 copy per parameter.
    """
    common = cfg.common
    if common.bf16 and common.tpu and distributed_utils.xm is None:
        logger.info("--bf16 on CPU: bfloat16 model, fp32 master weights (fairseq's bf16 path, no TPU)")
        for section in cfg.values():
            if isinstance(section, DictConfig) and section.get("tpu"):
                section.tpu = False
    if common.fp16 and not common.memory_efficient_fp16 and not common.fp16_no_flatten_grads:
        logger.info("--fp16 on CPU: fp32 master weights kept per parameter (--fp16-no-flatten-grads)")
        common.fp16_no_flatten_grads = True


def launched_by_torchrun() -> bool:
    return all(key in os.environ for key in ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"])


def infer_cpu_init_method(cfg) -> None:
    """fairseq's infer_init_method for a machine without CUDA devices. fairseq's own asserts
    world size <= CUDA device count (0), divides the torchrun rank by that count, ignores torchrun
    when --distributed-world-size is 1 (its default without GPUs) and, under SLURM with one task a
    node, makes the world 0 GPUs wide."""
    if launched_by_torchrun():
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.device_id = int(os.environ.get("LOCAL_RANK", 0))
        cfg.distributed_no_spawn = True
    elif cfg.distributed_world_size > 1 and not distributed_utils._infer_slurm_init(cfg, None):
        if cfg.distributed_port <= 0:
            cfg.distributed_port = random.randint(10000, 60000)
        cfg.distributed_init_method = f"tcp://localhost:{cfg.distributed_port}"
    if cfg.distributed_world_size < 1:
        raise ValueError(
            "SLURM with one task per node plans one process per GPU, and this machine has none: "
            "on CPU start one task per rank (srun --ntasks-per-node=<ranks per node>)"
        )


def call_main(cfg, main, **kwargs):
    """fairseq's entry point for every CLI. Validates the command line (fairseq_normformer/checks.py)
    and NORMFORMER_CHECKPOINT_CHECKS, then fixes fairseq's spawn on machines without CUDA devices:
    fairseq spawns min(CUDA devices, world size) = 0 processes and exits 0 without training; here
    every rank is spawned on this machine. With CUDA devices fairseq's call_main runs unchanged."""
    main = save_on_signal.training_main(main)
    on_cpu = trains_on_cpu(cfg.common)
    if on_cpu:
        use_cpu_precision_paths(cfg)
    checkpoint_checks_on()  # a bad NORMFORMER_CHECKPOINT_CHECKS stops the run here, not at its first save
    checks.check_config(cfg, on_cpu=on_cpu, cli=main.__module__)
    dist_cfg = cfg.distributed_training
    if torch.cuda.device_count() > 0 or cfg.common.tpu:
        return save_on_signal.launch(main, _fairseq_call_main, cfg, main, **kwargs)
    if dist_cfg.distributed_init_method is None:
        infer_cpu_init_method(dist_cfg)
    if dist_cfg.distributed_init_method is None or dist_cfg.distributed_no_spawn:
        return save_on_signal.launch(main, _fairseq_call_main, cfg, main, **kwargs)
    # fairseq's spawn (distributed/utils.py), with one process per rank, each given its share of
    # the cores as torchrun does (by default every rank would start one thread per core)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, os.cpu_count() // dist_cfg.distributed_world_size)))
    kwargs["start_rank"] = dist_cfg.distributed_rank
    dist_cfg.distributed_rank = None
    save_on_signal.launch(
        main,
        spawn_ranks,
        cfg,
        fn=distributed_utils.distributed_main,
        args=(main, cfg, kwargs),
        nprocs=dist_cfg.distributed_world_size,
    )


def DistributedDataParallel(module, device_ids=None, output_device=None, **kwargs):
    """fairseq's DistributedFairseqModel passes device_ids=[device_id] (a CUDA device) to
    torch's DDP for --ddp-backend pytorch_ddp (the default), which torch rejects for a CPU module;
    a CPU module takes device_ids=None. It also passes ``broadcast_buffers``, which torch >= 2.13
    deprecates (a FutureWarning on every rank) for ``forward_sync_buffers``: passed under that name.
    The new flag leaves the buffers' sync at start-up on, where all ranks hold the same buffers."""
    if next(module.parameters()).device.type == "cpu":
        device_ids = output_device = None
    if DDP_HAS_FORWARD_SYNC_BUFFERS and "broadcast_buffers" in kwargs:
        kwargs["forward_sync_buffers"] = kwargs.pop("broadcast_buffers")
    return _TorchDDP(module, device_ids=device_ids, output_device=output_device, **kwargs)


def train_step(self, samples, raise_oom=False):
    """fairseq handles an fp16 gradient overflow (skip the update, halve the loss scale) in an
    ``except OverflowError`` block that ends with ``torch.tensor(0.0).cuda()``: without CUDA that
    raises, and the run dies at its first overflow. Here that error (and only it: raised while
    handling an OverflowError, on CPU) ends fairseq's handling as fairseq would: no update."""
    try:
        return _fairseq_train_step(self, samples, raise_oom)
    except (AssertionError, RuntimeError) as e:  # "Torch not compiled with CUDA enabled" / "no GPUs"
        if self.cuda or not isinstance(e.__context__, OverflowError):
            raise
    self.zero_grad()
    metrics.log_scalar("loss_scale", self.optimizer.scaler.loss_scale, priority=700, round=4, weight=0)
    metrics.log_stop_time("train_wall")
    return None


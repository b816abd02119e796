"""Fully sharded training (``--ddp-backend fully_sharded``: fairscale 0.4's FSDP) on CPU, and on one process.

fairscale's FSDP was written for CUDA: it defaults its compute device to CUDA, orders its
all-gathers and reduce-scatters on CUDA streams, pins freed memory with ``record_stream`` and, with
--cpu-offload, its CPU copies with ``pin_memory``, and fairseq's Trainer moves the gradient norm to
CUDA before summing it over the shards. Each function below acts only without CUDA devices (or, for
the optimizer state, on a CPU compute device); with CUDA, fairscale's and fairseq's code runs
unchanged. The exceptions fix bugs of every device: ``load_local_state_dict`` (resuming from
--use-sharded-state), and one-process FSDP (``fully_sharded_init``, ``one_rank_optim_state``).
"""
from contextlib import contextmanager

import torch
from fairscale.internal import reduce_scatter_bucketer
from fairscale.nn.data_parallel import fsdp_optim_utils as optim_utils
from fairscale.nn.data_parallel import fully_sharded_data_parallel as fairscale_fsdp
from fairseq.distributed import fully_sharded_data_parallel as fairseq_fsdp
from fairseq.distributed import utils as distributed_utils
from fairseq.trainer import Trainer

_fairscale_default_device = fairscale_fsdp._get_default_cuda_device
_fairscale_gather_optim_state = fairscale_fsdp.FullyShardedDataParallel._gather_optim_state
_fairscale_load_local_state_dict = fairscale_fsdp.FullyShardedDataParallel.load_local_state_dict
_torch_record_stream = torch.Tensor.record_stream
_fairseq_clip_grad_norm = Trainer.clip_grad_norm
_fairseq_fsdp_init = fairseq_fsdp.FullyShardedDataParallel.__init__
_fairscale_init_param_attributes = fairscale_fsdp.FullyShardedDataParallel._init_param_attributes


class CpuStream(torch.cpu.Stream):
    def synchronize(self) -> None:
        """What --cpu-offload waits for after the backward (``current_stream().synchronize()``): nothing."""


class CpuStreams:
    """``torch.cpu``, whose Stream, stream(), current_stream() and synchronize() are torch's
    device-generic no-ops (work on CPU runs in program order), with streams that have synchronize()."""

    Stream = CpuStream
    default_stream = CpuStream()

    def current_stream(self, device=None) -> CpuStream:
        """The stream torch.cpu.stream() selected (fairscale's streams are CpuStreams), else the default."""
        stream = torch.cpu.current_stream()
        return stream if isinstance(stream, CpuStream) else self.default_stream

    def __getattr__(self, name):
        return getattr(torch.cpu, name)


class TorchWithCpuStreams:
    """fairscale's FSDP module sees this as ``torch``: torch itself, except that without CUDA
    ``torch.cuda`` is CpuStreams."""

    def __getattr__(self, name):
        if name == "cuda" and not torch.cuda.is_available():
            return CpuStreams()
        return getattr(torch, name)


def default_compute_device(module: torch.nn.Module) -> torch.device:
    """fairscale falls back to ``torch.device("cuda")`` for a module on CPU; without CUDA, the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return _fairscale_default_device(module)


def record_stream(tensor: torch.Tensor, stream) -> None:
    """``Tensor.record_stream(torch.cpu.Stream)`` (what fairscale calls with the CPU streams above)
    is a no-op: CPU memory is not reused out of order. Every other call is torch's."""
    if isinstance(stream, torch.cpu.Stream):
        return None
    return _torch_record_stream(tensor, stream)


def use_collectives_gloo_has() -> None:
    """fairscale all-gathers and reduce-scatters with the flat "base" collectives, which gloo
    rejects; without CUDA devices it uses the list collectives (its ENABLE_NCCL_BASE_COLLECTIVES=0)."""
    if not torch.cuda.is_available():
        fairscale_fsdp.enable_nccl_base_collectives = False
        reduce_scatter_bucketer.enable_nccl_base_collectives = False


def gather_optim_state(self, sd_state: dict):
    """fairscale gathers every optimizer state tensor of a shard into ONE reused buffer and keeps
    ``[x.cpu() for x in buffer]``: on a CPU compute device ``.cpu()`` copies nothing, so every
    state (Adam's exp_avg, exp_avg_sq) ends up holding the last one gathered, and a full checkpoint
    resumes silently wrong. Here each state tensor is gathered by its own call (its own buffer).
    On one process (every device) there is nothing to gather, and fairscale's gather fails: it sizes its
    buffer by the gathered parameter, which an unsharded parameter does not have."""
    if self.world_size == 1:
        return one_rank_optim_state(sd_state)
    if self.compute_device.type != "cpu":
        return _fairscale_gather_optim_state(self, sd_state)
    gathered, singletons = {}, {}
    for key, state in sd_state.items():
        gathered[key], singletons[key] = {}, {}
        for name, value in state.items():
            one_gathered, one_singleton = _fairscale_gather_optim_state(self, {key: {name: value}})
            gathered[key].update(one_gathered.get(key, {}))
            singletons[key].update(one_singleton.get(key, {}))
    return gathered, singletons


def one_rank_optim_state(sd_state: dict):
    """What fairscale's gather returns on rank 0 of 1: each state value as the one shard there is
    (copies of the tensors, 0-dim ones apart, as fairscale keeps them)."""
    gathered, singletons = {}, {}
    for key, state in sd_state.items():
        gathered[key], singletons[key] = {}, {}
        for name, value in state.items():
            if optim_utils.is_singleton_tensor(value):
                singletons[key][name] = [value.detach().cpu().clone().squeeze()]
            else:
                gathered[key][name] = [value.detach().cpu().clone() if torch.is_tensor(value) else value]
    return gathered, singletons


def load_local_state_dict(self, state_dict, strict: bool = True):
    """fairscale frees every wrapper's gathered parameters after loading a shard, which fails
    ("'FlatParameter' object has no attribute '_full_param_padded'") before the first forward has
    set them up: resuming from --use-sharded-state died. They are set up first (the root's
    ``_lazy_init``, as fairscale's own full-state load does, then the nested wrappers', as their
    first forward would)."""
    for wrapper in fairscale_fsdp.get_fsdp_instances(self):
        wrapper._lazy_init()
    return _fairscale_load_local_state_dict(self, state_dict, strict)


def clip_grad_norm(self, clip_norm):
    """fairseq sums the squared gradient norms of the shards after ``total_norm.cuda()``; on CPU
    the same sum, on the CPU."""
    if self.cuda or not self.is_fsdp:
        return _fairseq_clip_grad_norm(self, clip_norm)

    def sum_over_shards(total_norm):
        total_norm = distributed_utils.all_reduce(total_norm.float() ** 2, group=self.data_parallel_process_group)
        return total_norm**0.5

    sharded = self.data_parallel_process_group is not None or torch.distributed.is_initialized()
    return self.optimizer.clip_grad_norm(clip_norm, aggregate_norm_fn=sum_over_shards if sharded else None)


def one_process_group():
    """fairseq's data-parallel group, after starting a 1-rank process group if none was started (an
    in-memory store: nothing to connect to). NCCL with CUDA devices, else gloo."""
    if not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(backend, store=torch.distributed.HashStore(), rank=0, world_size=1)
    return distributed_utils.get_data_parallel_group()


def fully_sharded_init(self, *args, process_group=None, **kwargs):
    """One process (world size 1, no process group): fairseq gives FSDP a ``DummyProcessGroup``, but
    fairscale asks torch.distributed for its reduce-scatter group at once ("torch.distributed is not
    yet initialized but process group is requested"). FSDP gets a real group of 1 rank instead."""
    if isinstance(process_group, fairseq_fsdp.DummyProcessGroup):
        process_group = one_process_group()
    _fairseq_fsdp_init(self, *args, process_group=process_group, **kwargs)


@contextmanager
def pinning_does_nothing():
    pin_memory = torch.Tensor.pin_memory
    torch.Tensor.pin_memory = lambda tensor, *args, **kwargs: tensor
    try:
        yield
    finally:
        torch.Tensor.pin_memory = pin_memory


def init_param_attributes(self, p):
    """With --cpu-offload fairscale pins the CPU copies of a parameter (for non-blocking copies to the
    GPU); without CUDA, pinning fails ("Cannot access accelerator device when none is available") and
    there is no GPU to copy to: the copies stay unpinned. Everything else of the offload is fairscale's."""
    if torch.cuda.is_available():
        return _fairscale_init_param_attributes(self, p)
    with pinning_does_nothing():
        return _fairscale_init_param_attributes(self, p)

"""Multi-process runs: resuming (the checkpoint rank 0 loads reaches the other ranks), a dead
peer ending the run instead of hanging it, with one line that says how to resume, and torchrun
restarting a run (``--max-restarts``).

On resume rank 0 reads checkpoint_last.pt and fairseq broadcasts its non-tensor part (the config
as an omegaconf DictConfig, the optimizer history, the data iterator's and the metrics' state) to
the other ranks with ``_broadcast_object_slow``: torch.save on rank 0, torch.load on the others.
torch >= 2.6 loads with weights_only=True, which refuses the DictConfig, so every multi-process
resume (on GPUs as on CPU) died on ranks > 0 with "Unsupported global: ... DictConfig".
"""
import io
import os
import re
import signal
import sys
from datetime import timedelta

import torch
from fairseq.distributed import utils as distributed_utils
from torch.distributed import PrefixStore, distributed_c10d

from ..checks import print_error

_fairseq_broadcast_object_slow = distributed_utils._broadcast_object_slow
_fairseq_distributed_init = distributed_utils.distributed_init
_torch_rendezvous = distributed_c10d.rendezvous
_fairseq_distributed_main = distributed_utils.distributed_main
# gloo's errors when another process of the run is gone (its connection closed) or silent for the process
# group's timeout (--heartbeat-timeout, below)
LOST_PEER = re.compile(r"Connection (?:closed|reset) by peer|Timed out waiting \d+ms")
FAIRSEQ_RESTORE_FILE = "checkpoint_last.pt"  # fairseq's default --restore-file: SAVE_DIR/checkpoint_last.pt


def broadcast_object_slow(obj, src_rank: int, group, dist_device: torch.device):
    """fairseq's, with the receiving ranks unpickling the object in full (weights_only=False). The
    bytes are what ``src_rank`` of the same job pickled a moment ago, from an object fairseq itself
    built or loaded there (a checkpoint rank 0 has just loaded, fairseq's sharded optimizer state):
    nothing a weights_only load guards against comes from anywhere but the job itself."""
    if distributed_utils.get_rank(group) == src_rank:
        return _fairseq_broadcast_object_slow(obj, src_rank, group, dist_device)
    length = torch.LongTensor([0]).to(dist_device)
    distributed_utils.broadcast(length, src=src_rank, group=group)
    buffer = torch.ByteTensor(int(length.item())).to(dist_device)
    distributed_utils.broadcast(buffer, src=src_rank, group=group)
    return torch.load(io.BytesIO(buffer.cpu().numpy()), map_location="cpu", weights_only=False)


def distributed_init(cfg):
    """fairseq's, then ``--heartbeat-timeout N`` (fairseq's "kill the job if no progress is made in N
    seconds") also becomes the process group's timeout. fairseq's heartbeat SIGINTs a process whose
    model ran no forward for N seconds, but a process blocked in a collective (DDP's gradient
    all-reduce) on a peer that stopped without closing its connections (a frozen process, a machine
    gone) handles the signal only when the collective returns: after the process group's timeout,
    30 minutes for gloo, 10 for NCCL (whose watchdog then aborts). With it at N, that collective
    fails after N seconds and the process exits. A peer that *exits* (SIGKILL, a crash) closes its
    connections: gloo fails the collective at once (NCCL may notice only at its watchdog's timeout;
    not measured, no GPU here). fairseq passes no timeout to init_process_group, so it is set after
    it, with torch's ``_set_pg_timeout`` (private, in torch since 2.3)."""
    rank = _fairseq_distributed_init(cfg)
    seconds = getattr(cfg, "distributed_training", cfg).heartbeat_timeout
    if seconds > 0 and torch.distributed.is_initialized():
        # the default group, and fairseq's global group (DDP's and fairseq's own collectives), which
        # every rank creates here, in the same order, as fairseq would at its first collective
        for group in (None, distributed_utils.get_global_group()):
            torch.distributed.distributed_c10d._set_pg_timeout(timedelta(seconds=seconds), group)
    return rank


def torchrun_attempt():
    """Which restart of its workers a torchrun agent is running (0 for the first start), when the
    agent's store is shared with them (TORCHELASTIC_USE_AGENT_STORE=True); else None."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def rendezvous(url: str, rank: int = -1, world_size: int = -1, **kwargs):
    """torch's rendezvous for init_process_group, with each torchrun attempt on keys of its own.

    Since torch 2.5 a torchrun agent hosts the TCPStore its workers' env:// rendezvous connects to
    (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0, the default) and keeps it across restarts. The
    restarted workers then find the dead attempt's keys: gloo's addresses of the dead ranks
    (connectFullMesh: "Connection refused", or a hang), NCCL's ncclUniqueId under key "0" (rank
    0 of the new attempt writes a new one; the others may read the old one and wait in
    ncclCommInitRank). Each attempt's process group lives under the prefix ``attempt-N``, N the
    agent's restart count: every agent counts the same under a static rendezvous
    (--master-addr/--master-port) and with one agent (--standalone). Under a multi-node c10d
    rendezvous the counts can differ: there TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 gives every
    attempt a new store and this function no prefix (docs/distributed.md)."""
    attempt = torchrun_attempt()
    found = _torch_rendezvous(url, rank, world_size, **kwargs)
    if attempt is None:
        return found
    return ((PrefixStore(f"attempt-{attempt}", store), rank, size) for store, rank, size in found)


def distributed_main(i, main, cfg, kwargs):
    """fairseq's (one rank of a multi-process run: spawned, torchrun or started by hand). When a
    collective fails because another process of the run is lost, this rank ends with one line, which
    says so and how to resume, instead of a 40-line traceback of gloo's error."""
    try:
        return _fairseq_distributed_main(i, main, cfg, kwargs)
    except (RuntimeError, KeyboardInterrupt) as error:  # KeyboardInterrupt: the heartbeat's, see below
        lost = lost_peer(error)
        if lost is None:
            raise
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # fairseq's heartbeat (--heartbeat-timeout) ends nothing more
    dist = cfg.distributed_training
    print_error(f"rank {dist.distributed_rank} lost another process of the run "
                f"({dist.distributed_backend}: {lost}): {how_to_resume(cfg, dist.distributed_rank)}")  # fmt: skip
    sys.exit(1)


def spawn_ranks(cfg, fn, args, nprocs: int):
    """This machine's ranks on CPU (cpu_training.call_main), started as torch.multiprocessing.spawn does but
    forked: a rank inherits this process's imports of torch, fairseq and the plugin, ~6 s of CPU per rank as a
    new interpreter (no CUDA here; a rank sets OMP_NUM_THREADS threads, as a new process would). When one is
    ended by a signal (SIGKILL, the OOM killer) the others are stopped and the run ends with one line. A rank
    that exited with an error code has printed why (the line above); the run exits with that code (75: the
    ranks saved on a signal, save_on_signal)."""
    try:
        return torch.multiprocessing.start_processes(forked_rank, (fn, *args), nprocs, start_method="fork")
    except torch.multiprocessing.ProcessExitedException as ended:
        if ended.signal_name:
            print_error(f"process {ended.error_index} of the run was ended by {ended.signal_name}, and the others "
                        f"stopped: {how_to_resume(cfg, rank=0)}")  # fmt: skip
        sys.exit(ended.exit_code if ended.exit_code and ended.exit_code > 0 else 1)


def forked_rank(i: int, fn, *args):
    """``fn(i, *args)`` in a forked rank, with the thread count a new process reads from OMP_NUM_THREADS
    (a forked one keeps its parent's)."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    return fn(i, *args)


def lost_peer(error):
    """gloo's words for a lost peer, in ``error`` or in an error it interrupted: a peer silent for
    --heartbeat-timeout fails the collective when fairseq's heartbeat SIGINTs this process too."""
    while error is not None:
        lost = LOST_PEER.search(str(error)) if isinstance(error, RuntimeError) else None
        if lost is not None:
            return lost.group(0)
        error = error.__context__
    return None


def how_to_resume(cfg, rank: int) -> str:
    """What the same command does next: resume from ``rank``'s last checkpoint (at update N), or start
    again; with another --restore-file, which one to give instead."""
    checkpoint = cfg.checkpoint
    suffix = checkpoint.checkpoint_suffix or ""
    if cfg.distributed_training.ddp_backend == "fully_sharded" and cfg.distributed_training.use_sharded_state:
        suffix += f"-shard{rank}"
    last = os.path.join(checkpoint.save_dir, f"checkpoint_last{suffix}.pt")
    if not os.path.exists(last):
        return f"run the same command to start again (no checkpoint in {checkpoint.save_dir} yet)"
    update = saved_update(last)
    if checkpoint.restore_file != FAIRSEQ_RESTORE_FILE:
        restarts = f"the same command restarts from {checkpoint.restore_file}"
        return f"resume from update {update} with --restore-file {last} ({restarts})"
    return f"run the same command to resume from update {update} ({last})"


def saved_update(path: str):
    """The update a fairseq checkpoint was saved at (its pickled part only: mmap), or '?' if unreadable."""
    try:
        return torch.load(path, map_location="cpu", mmap=True)["optimizer_history"][-1]["num_updates"]
    except Exception:  # a checkpoint damaged on disk: its load on resume names the damage
        return "?"

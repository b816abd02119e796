"""Save on a signal: a preempted fairseq-train saves checkpoint_last and exits 75 (EX_TEMPFAIL).

SLURM, Kubernetes and spot instances send SIGTERM (or ``#SBATCH --signal``'s signal) a grace
period before they kill a job; fairseq dies at once and loses everything since its last save.
Here each training process installs handlers for the signals of NORMFORMER_SAVE_ON_SIGNAL
(default SIGTERM,SIGUSR1; ``none``: fairseq's behaviour). A handler only records the signal. At
each update boundary the record is all-reduced (MAX) over the ranks, so that a signal to any one
rank stops every rank after the same update; then all save checkpoint_last through fairseq's
save_checkpoint (full or sharded, as configured), rank 0 prints one line, and every process exits
75. A signal during the save changes nothing: the save completes.
"""
import argparse
import multiprocessing
import os
import signal
import sys

import fairseq_cli.train as fairseq_train
import torch
from fairseq import checkpoint_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.distributed import utils as distributed_utils

from ..checks import BadInput

SWITCH = "NORMFORMER_SAVE_ON_SIGNAL"
DEFAULT_SIGNALS = "SIGTERM,SIGUSR1"
EXIT_STATUS = 75
LOADER = "fairseq_normformer.hydra_callback.LoadPlugin"  # a Hydra callback that loads the plugin before the launch  # EX_TEMPFAIL (sysexits.h): "try again later"; the same command resumes

_fairseq_main = fairseq_train.main
_fairseq_validate_and_save = fairseq_train.validate_and_save


class Received:
    """What this process's handlers recorded: the first signal and the last update finished before it."""

    signal = 0
    after_update = -1
    trainer = None  # known from the first update on
    saving_on = False  # handlers installed (not with none, --no-save or --no-last-checkpoints)
    stopped = False  # checkpoint_last saved for a signal: exit EXIT_STATUS


def signals_to_save_on() -> list:
    """The signals of NORMFORMER_SAVE_ON_SIGNAL: names such as SIGTERM,SIGUSR1 (or TERM,USR1), or none."""
    value = os.environ.get(SWITCH, DEFAULT_SIGNALS)
    if value.strip().lower() == "none":
        return []
    names = [name.strip().upper() for name in value.split(",")]
    names = [name if name.startswith("SIG") else f"SIG{name}" for name in names]
    unknown = [name for name in names if name in ("SIGKILL", "SIGSTOP") or not hasattr(signal, name)]
    if unknown or not names:
        raise BadInput(f"{SWITCH} must be signal names such as {DEFAULT_SIGNALS} (the default) or none, not {value!r}")
    return [signal.Signals[name] for name in names]


def remember(signum, frame) -> None:
    """The handler: no I/O, the first signal is kept (a second one, during the save, changes nothing)."""
    if not Received.signal:
        Received.signal = signum
        Received.after_update = Received.trainer.get_num_updates() if Received.trainer else 0


def forward_to_ranks(signum, frame) -> None:
    """The handler of fairseq-train before training: a process that spawned the ranks
    (--distributed-world-size N) forwards the signal to them; one that has not (yet) dies of it."""
    ranks = multiprocessing.active_children()
    if not ranks:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    for rank in ranks:
        os.kill(rank.pid, signum)


def install(handler) -> None:
    for signum in signals_to_save_on():
        signal.signal(signum, handler)


def saves_checkpoint_last(checkpoint_cfg) -> bool:
    return not checkpoint_cfg.no_save and not checkpoint_cfg.no_last_checkpoints


class TrainMain:
    """fairseq_cli.train.main with the handlers installed first, in the process that trains (spawned
    rank, torchrun worker, srun task or the only process), before any data-loading worker is forked
    (which inherits them). An instance, not a closure, so that torch.multiprocessing.spawn can pickle
    it; its ``__module__`` is main's, which the command-line checks read."""

    def __init__(self):
        self.__module__ = _fairseq_main.__module__

    def __call__(self, cfg, **kwargs):
        if isinstance(cfg, argparse.Namespace):  # train.main(args), as fairseq's main accepts it
            cfg = convert_namespace_to_omegaconf(cfg)
        Received.saving_on = saves_checkpoint_last(cfg.checkpoint) and bool(signals_to_save_on())
        install(remember if Received.saving_on else signal.SIG_DFL)  # --no-save: fairseq's behaviour
        _fairseq_main(cfg, **kwargs)
        if Received.stopped:
            sys.exit(EXIT_STATUS)


def training_main(main):
    """``main`` for call_main: fairseq's train.main however it was imported (fairseq-hydra-train holds it
    as ``pre_main`` from before the plugin loaded) is the one with the handlers."""
    return fairseq_train.main if main is _fairseq_main else main


def warn_if_loaded_by_fairseqs_main() -> None:
    """fairseq-hydra-train, or a script calling fairseq_cli.train.main, imports --user-dir inside main: after
    the launch, so save-on-signal and the command-line checks cannot act. One line says so and how to fix it."""
    frame = sys._getframe()
    while frame is not None and frame.f_code is not _fairseq_main.__code__:
        frame = frame.f_back
    if frame is not None:
        print(f"{os.path.basename(sys.argv[0])}: warning: fairseq_normformer was loaded inside fairseq's train.main "
              f"(common.user_dir), after the launch: save-on-signal and the command-line checks are off for this run; "
              f"fairseq-hydra-train: add hydra.callbacks.normformer._target_={LOADER} (docs/hydra.md)",
              file=sys.stderr, flush=True)  # fmt: skip


def agreed_signal(trainer) -> tuple:
    """(signal, received after update) over all ranks: (0, -1) when none received one."""
    record = torch.tensor([Received.signal, Received.after_update], dtype=torch.long)
    if torch.distributed.is_initialized():
        record = distributed_utils.all_reduce(record.to(trainer.device), distributed_utils.get_global_group(), "max")
    return tuple(record.tolist())


def validate_and_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch):
    """fairseq's, unless a rank received a signal: then checkpoint_last is saved (no validation) and
    training stops."""
    if not Received.saving_on:
        return _fairseq_validate_and_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch)
    Received.trainer = trainer
    signum, after_update = agreed_signal(trainer)
    if not signum:
        return _fairseq_validate_and_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch)
    checkpoint_utils.save_checkpoint(cfg.checkpoint, trainer, epoch_itr, None)
    wait_for_every_rank()  # every rank's part is written
    if distributed_utils.is_master(cfg.distributed_training):
        last = os.path.join(cfg.checkpoint.save_dir, f"checkpoint_last{trainer.checkpoint_suffix}.pt")
        print(f"{os.path.basename(sys.argv[0])}: stopped by {signal.Signals(signum).name} at update "
              f"{trainer.get_num_updates()} (received after update {after_update}); {last} saved: run the same "
              "command to resume", file=sys.stderr, flush=True)  # fmt: skip
    wait_for_every_rank()  # the line is out before a launcher ends the other ranks
    Received.stopped = True
    return [None], True


def wait_for_every_rank() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier(distributed_utils.get_global_group())


def launch(main, spawn, *args, **kwargs):
    """``spawn(*args, **kwargs)``, a function that may spawn the ranks, which run ``main``. For
    fairseq-train a signal to this process reaches them, and when they stopped on a signal this
    process exits with EXIT_STATUS too."""
    if isinstance(main, TrainMain):
        install(forward_to_ranks)
    try:
        return spawn(*args, **kwargs)
    except torch.multiprocessing.ProcessExitedException as e:
        if e.exit_code != EXIT_STATUS:
            raise
        sys.exit(EXIT_STATUS)

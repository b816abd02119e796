"""Fixes to fairseq 0.12, applied by ``apply()`` (which fairseq_normformer/__init__.py calls once).

``FIXES`` is the whole list: each entry names the fairseq symbols it replaces, the fairseq bug it
fixes, what it changes on CPU and on GPU, and its I/O cost. docs/fixes.md is the same table for
readers; tests/test_fixes.py checks that what is installed is what the table says.
"""
import importlib
from dataclasses import dataclass
from typing import Callable, Optional

import fairseq_cli.train as fairseq_train
import torch
from hydra._internal import utils as hydra_utils
from hydra.core.config_store import ConfigStore

from fairseq import checkpoint_utils
from fairseq.data import data_utils, iterators
from fairseq.dataclass import utils as dataclass_utils
from fairseq.distributed import utils as distributed_utils
from fairseq.models import distributed_fairseq_model
from fairseq.trainer import Trainer
from torch.distributed import distributed_c10d

from .. import checks
from . import (
    batch_prefetch,
    batches,
    checkpoint_last,
    checkpoints,
    config_store,
    cpu_training,
    data_position,
    distributed,
    hydra_caller,
    optimizer_state,
    safe_globals,
    save_on_signal,
)
from .checkpoints import CHECKS_SWITCH
from .warning_filters import silence_fairseq_hydra_warnings, silence_library_warnings

hydra_initialize = importlib.import_module("hydra.initialize")  # the module (the package's ``initialize`` is a class)

try:  # fairscale: the fsdp extra (requirements/fsdp.txt), fairseq's --ddp-backend fully_sharded
    from . import fairscale_fsdp
except ImportError:
    fairscale_fsdp = None

SWITCHABLE = f"turned off by {CHECKS_SWITCH}=0"


def symbol_name(owner, attribute: str) -> str:
    """``fairseq.trainer.Trainer.train_step`` for a class, ``fairseq.checkpoint_utils.PathManager`` for a module."""
    owner_name = f"{owner.__module__}.{owner.__name__}" if isinstance(owner, type) else owner.__name__
    return f"{owner_name}.{attribute}"


@dataclass(frozen=True)
class Fix:
    replacements: tuple  # (owner, attribute, replacement): applying sets owner.attribute = replacement
    bug: str
    on_cpu: str
    on_gpu: str = "the same as on CPU"
    io_cost: str = "none"
    setup: Optional[Callable[[], None]] = None  # for a fix that replaces no fairseq symbol

    def replaces(self) -> list:
        return [symbol_name(owner, attribute) for owner, attribute, _ in self.replacements]

    def apply(self) -> None:
        for owner, attribute, replacement in self.replacements:
            setattr(owner, attribute, replacement)
        if self.setup is not None:
            self.setup()


FIXES = {
    "call_main": Fix(
        replacements=((distributed_utils, "call_main", cpu_training.call_main),),
        bug="without CUDA devices fairseq spawns min(CUDA devices, world size) = 0 processes and exits 0; "
        "divides the torchrun rank by 0 devices; turns --bf16 into --tpu; keys --fp16's master copy by CUDA device",
        on_cpu="command-line checks (checks.py); one process per rank; --bf16 without --tpu; "
        "--fp16 with --fp16-no-flatten-grads",
        on_gpu="command-line checks (checks.py), then fairseq's call_main unchanged",
        io_cost="the checks stat the data files a run will load",
    ),
    "argument_checks": Fix(
        replacements=((dataclass_utils, "override_module_args", checks.override_module_args),),
        bug="--lr-scheduler polynomial_decay without --total-num-update: argparse gives null to a field hydra "
        "requires, and every CLI ends in an 81-line ConfigCompositionException",
        on_cpu="checks of the parsed arguments (checks.check_args) before fairseq composes its config",
    ),
    "one_line_bad_input": Fix(
        replacements=(),
        setup=checks.print_bad_input_as_one_line,
        bug="a CLI stopped by bad input (checks.BadInput: the command-line checks, the fine-tuning data readers) "
        "ends with the message as the last line of a 10-30-line traceback",
        on_cpu="sys.excepthook prints an uncaught BadInput as one line, 'PROGRAM: error: MESSAGE'; "
        "other exceptions keep their traceback",
    ),
    "cpu_ddp": Fix(
        replacements=((distributed_fairseq_model, "DistributedDataParallel", cpu_training.DistributedDataParallel),),
        bug="--ddp-backend pytorch_ddp passes device_ids=[0], which torch's DDP refuses for a CPU module, and "
        "broadcast_buffers, which torch >= 2.13 deprecates (a FutureWarning on every rank)",
        on_cpu="device_ids=None; broadcast_buffers passed as forward_sync_buffers (torch >= 2.13)",
        on_gpu="broadcast_buffers passed as forward_sync_buffers (torch >= 2.13)",
    ),
    "cpu_fp16_overflow": Fix(
        replacements=((Trainer, "train_step", cpu_training.train_step),),
        bug="the fp16 overflow handler ends with torch.tensor(0.0).cuda(): the first overflow kills a CPU run",
        on_cpu="the overflowing update is skipped and the loss scale halved, as fairseq does on GPU",
        on_gpu="none: fairseq's train_step",
    ),
    "atomic_checkpoint_writes": Fix(
        replacements=(
            (checkpoint_utils, "torch_persistent_save", checkpoints.torch_persistent_save),
            (checkpoint_utils, "PathManager", checkpoints.AtomicCopyPathManager),
        ),
        bug="saves are renamed into place without fsync, and checkpoint_last.pt is written by a copy that "
        "truncates it first: SIGKILL during the copy leaves an empty checkpoint_last.pt",
        on_cpu="local writes go to <name>.tmp, are fsynced and renamed over <name>",
        io_cost=f"an fsync of each checkpoint file and its directory ({SWITCHABLE}: then fairseq's save, "
        "and the copy to checkpoint_last.pt still renamed into place, without fsync)",
    ),
    "unreadable_checkpoint_last": Fix(
        replacements=((checkpoint_utils, "load_checkpoint", checkpoint_last.load_checkpoint),),
        bug="a checkpoint_last.pt that cannot be read (truncated, empty, random bytes) stops every resume with "
        "torch's traceback, which advises weights_only=False, though an intact checkpoint_E_U.pt lies beside it: "
        "a requeued preempted job waits for a person",
        on_cpu="resuming from the save dir's checkpoint_last (the default --restore-file), a damaged one is moved to "
        "checkpoint_last.pt.corrupt and the newest intact checkpoint of the save dir is loaded, with one line naming "
        "both; with none intact, one line and nothing moved; a file torch cannot unpickle is named in one line",
        io_cost=f"on that error only: a CRC read of the save dir's checkpoints, newest first ({SWITCHABLE})",
    ),
    "checkpoint_crc_check": Fix(
        replacements=((checkpoint_utils, "load_checkpoint_to_cpu", checkpoints.load_checkpoint_to_cpu),),
        bug="a checkpoint with damaged tensor bytes loads without a word; a truncated one fails with "
        "torch's 'PytorchStreamReader failed reading zip archive'",
        on_cpu="a local checkpoint's zip CRCs are checked before loading; damage is named with the file",
        io_cost=f"one more read of the whole file per load ({SWITCHABLE})",
    ),
    "dictionary_fingerprint": Fix(
        replacements=(
            (Trainer, "state_dict", checkpoints.trainer_state_dict),
            (Trainer, "load_checkpoint", checkpoints.trainer_load_checkpoint),
            (checkpoint_utils, "load_model_ensemble_and_task", checkpoints.load_model_ensemble_and_task),
        ),
        bug="a checkpoint records no dictionary: resuming or evaluating with another dictionary of the same "
        "size scrambles the embeddings silently",
        on_cpu="checkpoints record the md5 of their dictionaries' symbols; resume and evaluation check it",
        io_cost=f"a few bytes per checkpoint; a read of its pickled part (mmap) per load ({SWITCHABLE})",
    ),
    "refused_run_leaves_no_save_dir": Fix(
        replacements=((checkpoint_utils, "verify_checkpoint_directory", checkpoints.verify_checkpoint_directory),),
        setup=checkpoints.undo_save_directory_on_bad_input,
        bug="fairseq-train creates --save-dir before it reads its data: a run refused for bad data "
        "(checks.BadInput) leaves an empty save directory behind",
        on_cpu="the directories fairseq-train created are removed, deepest first, while empty, before the "
        "one-line error; anything already in them stays",
    ),
    "namespace_checkpoints": Fix(
        replacements=(),
        setup=safe_globals.allow_namespace_checkpoints,
        bug="torch >= 2.6 loads with weights_only=True and refuses the argparse.Namespace that "
        "argparse-configured models (RoBERTa) and older fairseq checkpoints store",
        on_cpu="argparse.Namespace is added to torch's safe globals",
    ),
    "metric_arrays_in_checkpoints": Fix(
        replacements=(),
        setup=safe_globals.allow_metric_arrays_in_checkpoints,
        bug="torch >= 2.6 loads with weights_only=True and refuses the numpy arrays that --eval-bleu's metrics "
        "leave in a checkpoint: fairseq-generate cannot load a translation model trained with --eval-bleu",
        on_cpu="numpy arrays, scalars and their dtypes are added to torch's safe globals",
    ),
    "batch_prefetch_exit": Fix(
        replacements=((iterators.BackgroundConsumer, "run", batch_prefetch.run),),
        setup=batch_prefetch.install,
        bug="a run that stops mid-epoch (--max-update) exits while the daemon thread loading batches ahead is in "
        "torch's C++ code: CPython's pthread_exit of daemon threads then aborts the process after it saved "
        "everything ('terminate called without an active exception', exit 134), now and then",
        on_cpu="the loading thread stops at its next hand-over; at exit the running ones are stopped and joined",
    ),
    "evaluation_covers_every_example": Fix(
        replacements=((data_utils, "batch_by_size", batches.batch_by_size),),
        bug="batch_by_size drops a last batch whose size is not a multiple of --required-batch-size-multiple "
        "(default 8): fairseq-generate, fairseq-validate and validation (loss, --eval-bleu) leave out up to 7 "
        "examples without a word",
        on_cpu="outside the training iterator (Trainer.get_train_iterator, resume_in_later_epochs) those examples "
        "are a last, smaller batch; training's batches are fairseq's",
    ),
    "resume_in_later_epochs": Fix(
        replacements=((Trainer, "get_train_iterator", batches.get_train_iterator),),
        bug="an uninterrupted run trains every epoch on epoch 1's batches (the task reuses its iterator), but a "
        "resume in epoch e > 1 cuts new ones with seed + e: resumed mid-epoch, examples are trained twice or "
        "never (330 of 1816 trained twice, 330 never, in a tiny LM's epoch 2)",
        on_cpu="a new training iterator for epoch e > 1 of a task that reuses its iterator is cut as epoch 1's",
    ),
    "finished_run_trains_no_more": Fix(
        replacements=((fairseq_train, "train", batches.train),),
        bug="fairseq's train loop checks --max-update only after an update: a finished run resumed (the same "
        "command again, a requeued job, torchrun restarting after the last save) trains update N + 1 and "
        "saves it over checkpoint_last",
        on_cpu="a run whose checkpoint has reached --max-update trains nothing and ends as finished",
    ),
    "data_position": Fix(
        replacements=(
            (iterators.EpochBatchIterator, "state_dict", data_position.state_dict),
            (iterators.EpochBatchIterator, "load_state_dict", data_position.load_state_dict),
            (iterators.EpochBatchIterator, "ordered_batches", data_position.ordered_batches),
        ),
        bug="the data iterator's saved position counts one rank's batches: resumed mid-epoch on M ranks "
        "instead of N, k·M batches are skipped where k·N were trained, so batches are trained twice or never",
        on_cpu="the saved state also records the world size and the batches of the epoch consumed by all "
        "ranks; a resume on M ranks deals out the rest to them, each batch once",
    ),
    "resume_broadcast": Fix(
        replacements=((distributed_utils, "_broadcast_object_slow", distributed.broadcast_object_slow),),
        bug="on resume rank 0 broadcasts the loaded checkpoint's config (a DictConfig) and state; torch >= 2.6 "
        "unpickles them with weights_only=True, which refuses DictConfig: every multi-process resume dies",
        on_cpu="ranks > 0 unpickle what rank 0 of the same job sent with weights_only=False",
    ),
    "collective_timeout": Fix(
        replacements=((distributed_utils, "distributed_init", distributed.distributed_init),),
        bug="--heartbeat-timeout N cannot stop a process blocked in a collective on a frozen or vanished peer: "
        "it waits for the process group's timeout (30 min gloo, 10 min NCCL)",
        on_cpu="with --heartbeat-timeout N > 0 the process group's timeout is N seconds: gloo's collectives fail after N s",
        on_gpu="the same for NCCL: its watchdog aborts a collective after N s",
    ),
    "torchrun_restarts": Fix(
        replacements=((distributed_c10d, "rendezvous", distributed.rendezvous),),
        bug="torch >= 2.5: torchrun's agent keeps the store its workers initialize on across restarts, so after "
        "torchrun --max-restarts N restarts the workers, they find the dead attempt's keys and wait in "
        "process-group init (gloo: 'Connection refused' to the dead ranks' addresses, or a hang)",
        on_cpu="under a torchrun agent's store (TORCHELASTIC_USE_AGENT_STORE=True) each attempt's process "
        "group lives under its own prefix, attempt-TORCHELASTIC_RESTART_COUNT",
        on_gpu="the same; it also gives NCCL's ncclUniqueId (key '0' of the group) a fresh key per attempt",
    ),
    "lost_peer_one_line": Fix(
        replacements=((distributed_utils, "distributed_main", distributed.distributed_main),),
        bug="a rank whose peer is lost (killed, crashed, frozen past --heartbeat-timeout) ends with a 40-line "
        "traceback of gloo's 'Connection closed by peer' (then torchrun's report); what to do is nowhere",
        on_cpu="that rank prints one line, 'PROGRAM: error: rank R lost another process of the run (gloo: ...): "
        "run the same command to resume from update N (SAVE_DIR/checkpoint_last.pt)', and exits 1; a process "
        "fairseq-train spawned (call_main) that is killed ends the run with such a line too",
        on_gpu="the same for gloo's errors; NCCL's are left as they are",
        io_cost="on that error only: a read of the last checkpoint's pickled part (mmap)",
    ),
    "save_on_signal": Fix(
        replacements=(
            (fairseq_train, "main", save_on_signal.TrainMain()),
            (fairseq_train, "validate_and_save", save_on_signal.validate_and_save),
        ),
        setup=save_on_signal.warn_if_loaded_by_fairseqs_main,
        bug="SIGTERM (SLURM's, Kubernetes', a spot instance's notice of preemption) kills fairseq-train at once: "
        "everything since the last save is lost, up to a whole --save-interval-updates",
        on_cpu="the signals of NORMFORMER_SAVE_ON_SIGNAL (default SIGTERM,SIGUSR1; none: fairseq's behaviour) "
        "are recorded; at the next update boundary every rank agrees (all-reduce), saves checkpoint_last and "
        "exits 75; a process that spawned the ranks forwards the signals to them; fairseq's main however it was "
        "imported (fairseq-hydra-train's pre_main) is run with them; a plugin loaded inside main (fairseq-hydra-train "
        "without the LoadPlugin callback) says in one line that they are off",
        io_cost="one all-reduce of two integers per update (none with one process)",
    ),
    "optimizer_state_by_name": Fix(
        replacements=(
            (Trainer, "save_checkpoint", optimizer_state.save_checkpoint),
            (checkpoint_utils, "_upgrade_state_dict", optimizer_state.upgrade_state_dict),
        ),  # and fairseq's resume, checkpoint_utils.load_checkpoint, marks the run as resuming: unreadable_checkpoint_last calls it
        bug="the optimizer state is loaded by position, in the order the saving configuration kept it: "
        "FSDP's order into one process fails in Adam (size mismatch) or, where shapes coincide, puts moments "
        "on the wrong parameters; DDP into FSDP: KeyError 'param_id_map'; fp32 into --fp16: 'Optimizer does "
        "not match'",
        on_cpu="checkpoints record the state's layout (parameter names in order); a resume in another "
        "backend, world size or precision converts it by name; the fp16 loss scale into fp32/bf16 is dropped "
        "with one line; a mismatch is refused with one line",
        io_cost=f"a few bytes per checkpoint ({SWITCHABLE}: then the layout is inferred)",
    ),
    "config_store_copy": Fix(
        replacements=((ConfigStore, "__deepcopy__", config_store.the_store_itself),),
        bug="hydra 1.3 deep-copies its ConfigStore, every dataclass fairseq registers, each time fairseq composes "
        "its config (every CLI at its start): 0.13 s of CPU a composition, and a copy that no "
        "later registration reaches",
        on_cpu="a deep copy of the ConfigStore, a singleton, is the store itself (hydra's main branch no longer "
        "copies it), from the plugin's import on (not in fairseq-hydra-train's composition, before it loads the "
        "plugin); the composed config is the same",
    ),
    "hydra_caller_frame": Fix(
        replacements=(
            (hydra_utils, "detect_calling_file_or_module_from_stack_frame", hydra_caller.calling_file_or_module),
            (hydra_initialize, "detect_calling_file_or_module_from_stack_frame", hydra_caller.calling_file_or_module),
        ),
        bug="hydra 1.3's initialize(), which fairseq calls each time it composes its config, reads its caller's file "
        "from inspect.stack(): the source file and module of every frame of the stack, and for a frame of no file "
        "(python -m's, an exec'd string's) a scan of sys.modules: 14 ms of CPU per such frame",
        on_cpu="only the caller's frame is read (sys._getframe), from the plugin's import on (fairseq-hydra-train "
        "finds its task function's file before it loads the plugin, as hydra does); the file and module are hydra's",
    ),
    "hydra_warnings": Fix(
        replacements=(),
        setup=silence_fairseq_hydra_warnings,
        bug="every CLI start prints six hydra deprecation warnings about fairseq's own code and configs",
        on_cpu="those six messages are filtered (warnings.filterwarnings, by message); other warnings stay",
    ),
    "library_warnings": Fix(
        replacements=(),
        setup=silence_library_warnings,
        bug="torch warns at every update about fairseq's calls (pin_memory without an accelerator, "
        "torch.cuda.amp.autocast), and under FSDP about fairscale's TypedStorage",
        on_cpu="those three messages are filtered, each by message, category and module; other warnings stay",
        on_gpu="the same (pin_memory's does not arise)",
    ),
}

if fairscale_fsdp is not None:
    fsdp = fairscale_fsdp.fairscale_fsdp  # fairscale's fully_sharded_data_parallel module
    fairseq_fsdp = fairscale_fsdp.fairseq_fsdp  # fairseq's
    FIXES.update({
        "fsdp_cpu_streams": Fix(
            replacements=(
                (fsdp, "torch", fairscale_fsdp.TorchWithCpuStreams()),
                (torch.Tensor, "record_stream", fairscale_fsdp.record_stream),
            ),
            bug="fairscale's FSDP creates CUDA streams only when CUDA exists, then looks them up anyway "
            "(KeyError: 'all_gather'), and calls record_stream, which CPU tensors do not have",
            on_cpu="inside fairscale's FSDP module torch.cuda is torch.cpu (device-generic no-op streams, with a "
            "no-op synchronize, which --cpu-offload calls); record_stream with such a stream does nothing",
            on_gpu="none: torch.cuda and record_stream are torch's",
        ),
        "fsdp_cpu_device": Fix(
            replacements=((fsdp, "_get_default_cuda_device", fairscale_fsdp.default_compute_device),),
            setup=fairscale_fsdp.use_collectives_gloo_has,
            bug="fairscale's FSDP computes on torch.device('cuda') when the module is on CPU, and "
            "all-gathers/reduce-scatters with the 'base' collectives, which gloo rejects",
            on_cpu="compute device cpu; the list collectives (fairscale's ENABLE_NCCL_BASE_COLLECTIVES=0)",
            on_gpu="none: fairscale's defaults",
        ),
        "fsdp_optimizer_state_gather": Fix(
            replacements=((fsdp.FullyShardedDataParallel, "_gather_optim_state", fairscale_fsdp.gather_optim_state),),
            bug="consolidating the optimizer state for a full checkpoint gathers every state tensor into one "
            "reused buffer and keeps x.cpu() of it, which copies nothing on CPU: the saved Adam exp_avg "
            "equals exp_avg_sq and a resumed run diverges without an error",
            on_cpu="each state tensor is gathered into its own buffer; on one process (any device), where "
            "fairscale's gather fails (no sharded parameter to size its buffer by), each is copied as the one shard",
            on_gpu="on more than one process none: fairscale's gather (.cpu() copies from the GPU)",
        ),
        "fsdp_sharded_resume": Fix(
            replacements=((fsdp.FullyShardedDataParallel, "load_local_state_dict", fairscale_fsdp.load_local_state_dict),),
            bug="loading a shard (--use-sharded-state resume) frees the gathered parameters of every FSDP wrapper, "
            "which do not exist before the first forward: AttributeError '_full_param_padded'",
            on_cpu="the wrappers are initialised first (fairscale's _lazy_init, as its full-state load does)",
        ),
        "one_process_group_for_fsdp": Fix(
            replacements=((fairseq_fsdp.FullyShardedDataParallel, "__init__", fairscale_fsdp.fully_sharded_init),),
            bug="--ddp-backend fully_sharded on one process (fairseq's single-GPU FSDP, with --cpu-offload for a "
            "model larger than the GPU) stops with fairscale's 'torch.distributed is not yet initialized but "
            "process group is requested'",
            on_cpu="FSDP on one process gets a 1-rank gloo process group (an in-memory store, no port)",
            on_gpu="the same with NCCL (not run: no GPU here)",
        ),
        "fsdp_cpu_offload": Fix(
            replacements=((fsdp.FullyShardedDataParallel, "_init_param_attributes", fairscale_fsdp.init_param_attributes),),
            bug="--cpu-offload pins the CPU copies of the parameters, which fails without CUDA "
            "('Cannot access accelerator device when none is available')",
            on_cpu="the copies stay unpinned (Tensor.pin_memory returns the tensor while fairscale sets them up)",
            on_gpu="none: fairscale's pinned copies",
        ),
        "fsdp_cpu_grad_norm": Fix(
            replacements=((Trainer, "clip_grad_norm", fairscale_fsdp.clip_grad_norm),),
            bug="under --ddp-backend fully_sharded, Trainer.clip_grad_norm moves the norm to CUDA "
            "(total_norm.cuda()) before summing it over the shards",
            on_cpu="the same sum on the CPU",
            on_gpu="none: fairseq's clip_grad_norm",
        ),
    })


def applied() -> bool:
    """Whether the fixes are in place (by this copy of the package or another)."""
    return distributed_utils.call_main.__module__.endswith(".fixes.cpu_training")


def apply() -> None:
    """Apply every fix in FIXES, once: later calls change nothing."""
    if applied():
        return
    for fix in FIXES.values():
        fix.apply()

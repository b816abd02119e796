"""Checks of a fairseq command line, run before anything is built or written.

Each check raises BadInput with a message that names the problem and the fix, instead of the
traceback (or the silent misbehaviour) fairseq would produce later; the CLIs print it as one line.
They run from every fairseq CLI entry point (``call_main``, see fixes/cpu_training.py; ``check_args``
earlier, from ``override_module_args``) and reject only what cannot work.
What a task reads from its data directory is declared (``DataNeeds``), not imported: our tasks
carry a ``data_needs`` attribute, fairseq's are listed in FAIRSEQ_TASK_NEEDS.
"""
import argparse
import importlib.util
import os
import re
import sys
from dataclasses import dataclass

from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import utils as dataclass_utils
from fairseq.tasks import TASK_REGISTRY
from omegaconf import OmegaConf

REBUILD = "rebuild the data directory with normformer-build-corpus or fairseq-preprocess"
TRAINING_CLIS = ("fairseq_cli.train", "fairseq_cli.hydra_train")  # the modules of their main functions

# Sizes that fail deep inside model building when zero or negative (--decoder-embed-dim 0:
# ZeroDivisionError in fairseq's Embedding), in the LM (decoder_*) and the encoders (encoder_*).
MODEL_SIZE = re.compile(r"(decoder|encoder)_(embed_dim|ffn_embed_dim|input_dim|output_dim|layers|attention_heads)")
TASK_SIZE = re.compile(r"tokens_per_sample")  # 0: ZeroDivisionError while blocking the data


class BadInput(ValueError):
    """Input that cannot work: a command line, a data file. Uncaught, it ends the program with its
    message as one line on stderr, no traceback (``print_bad_input_as_one_line``)."""


UNDO_ON_BAD_INPUT = []  # run before a BadInput's line is printed: undo what the refused run created


def print_bad_input_as_one_line() -> None:
    """Installs a sys.excepthook that prints an uncaught BadInput as ``PROGRAM: error: MESSAGE``
    (as argparse does) and hands every other exception to the hook installed before."""
    previous = sys.excepthook

    def excepthook(kind, error, traceback):
        if not report_bad_input(error):
            previous(kind, error, traceback)

    sys.excepthook = excepthook


def report_bad_input(error) -> bool:
    """For a BadInput behind ``error``: undo what the refused run created and print its one line."""
    bad_input = bad_input_behind(error)
    if bad_input is None:
        return False
    for undo in UNDO_ON_BAD_INPUT:
        undo()
    print_error(str(bad_input))
    return True


def bad_input_behind(error):
    """The BadInput ``error`` is, or was raised while handling (fairseq's trainer turns any failed
    ``load_state_dict`` into "Cannot load model parameters ..."); None if there is none."""
    while error is not None and not isinstance(error, BadInput):
        error = error.__cause__ or error.__context__
    return error


def print_error(message: str) -> None:
    """``PROGRAM: error: MESSAGE`` on stderr, as argparse prints a usage error."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class DataNeeds:
    """What a task reads: ``dictionary`` (relative to the first data directory) when it is set up,
    and for every split it loads, the binarized datasets ``<prefix>.bin``/``.idx`` of ``splits``
    (``{split}`` stands for the split's name; relative to the data directory of the epoch)."""

    dictionary: str = "dict.txt"
    splits: tuple = ("{split}",)

    def dictionaries(self, data_dir: str, task_options: dict) -> list:
        return [self.dictionary]

    def split_prefixes(self, data_dir: str, split: str, task_options: dict) -> list:
        return [prefix.format(split=split) for prefix in self.splits]


class LanguagePairNeeds(DataNeeds):
    """fairseq's translation task: ``dict.{src}.txt`` and ``dict.{tgt}.txt``, and every split binarized for
    both languages as ``{split}.{src}-{tgt}.{lang}`` (or ``{split}.{tgt}-{src}.{lang}``). The pair is
    --source-lang/--target-lang, or what fairseq infers from the first data directory's file names."""

    def language_pair(self, data_dir: str, task_options: dict):
        src, tgt = task_options.get("source_lang"), task_options.get("target_lang")
        if src is None or tgt is None:  # as TranslationTask.setup_task
            src, tgt = data_utils.infer_language_pair(data_dir)
            if src is None:
                raise BadInput(
                    f"data directory {data_dir!r} has no '<split>.<src>-<tgt>.<lang>' files to take the language "
                    f"pair from: pass --source-lang and --target-lang, or {REBUILD}"
                )
        for side, lang in (("source", src), ("target", tgt)):
            if not os.path.isfile(os.path.join(data_dir, f"dict.{lang}.txt")):
                raise BadInput(
                    f"--{side}-lang {lang}: data directory {data_dir!r} has no dictionary dict.{lang}.txt "
                    f"(its language pairs: {', '.join(language_pairs(data_dir)) or 'none'})"
                )
        return src, tgt

    def dictionaries(self, data_dir: str, task_options: dict) -> list:
        return [f"dict.{lang}.txt" for lang in self.language_pair(data_dir, task_options)]

    def split_prefixes(self, data_dir: str, split: str, task_options: dict) -> list:
        src, tgt = self.language_pair(data_dir, task_options)
        direction = f"{split}.{src}-{tgt}"
        if not os.path.isfile(os.path.join(data_dir, f"{direction}.{src}.idx")):
            reverse = f"{split}.{tgt}-{src}"  # fairseq reads a pair binarized the other way round too
            direction = reverse if os.path.isfile(os.path.join(data_dir, f"{reverse}.{src}.idx")) else direction
        return [f"{direction}.{src}", f"{direction}.{tgt}"]


def language_pairs(data_dir: str) -> list:
    """The ``src-tgt`` of the binarized files ``<split>.<src>-<tgt>.<lang>.idx`` in a data directory."""
    names = (re.fullmatch(r"[^.]+\.([^.-]+-[^.-]+)\.[^.]+\.idx", name) for name in os.listdir(data_dir))
    return sorted({match.group(1) for match in names if match})


# fairseq's own tasks (their setup_task and load_dataset); ours declare ``data_needs`` themselves.
FAIRSEQ_TASK_NEEDS = {
    "language_modeling": DataNeeds(),
    "masked_lm": DataNeeds(),
    "sentence_prediction": DataNeeds(dictionary="input0/dict.txt", splits=("input0/{split}",)),
    "translation": LanguagePairNeeds(),
}


_fairseq_override_module_args = dataclass_utils.override_module_args


def override_module_args(args):
    """fairseq's first step from the parsed command line to its config (convert_namespace_to_omegaconf,
    run by every CLI), after ``check_args``."""
    check_args(args)
    return _fairseq_override_module_args(args)


def check_args(args) -> None:
    """Checks of the parsed command line, for what fails while fairseq composes its config."""
    if getattr(args, "lr_scheduler", None) == "polynomial_decay" and getattr(args, "total_num_update", None) is None:
        raise BadInput(  # fairseq: hydra's "Error merging override lr_scheduler.total_num_update=null" (81 lines)
            "--lr-scheduler polynomial_decay needs --total-num-update N, the number of updates to decay over "
            "(fairseq 0.12 does not take it from --max-update)"
        )


def check_config(cfg, on_cpu: bool, cli: str = "") -> None:
    """``cli``: the module of the CLI's main function (fairseq_cli.train, fairseq_cli.eval_lm, ...)."""
    check_data_dirs(cfg.task, cfg.dataset, splits_loaded(cli, cfg.dataset))
    check_shared_dictionary(cfg.task, cfg.model)
    check_positive(cfg.task, TASK_SIZE, "must be positive")
    check_positive(cfg.model, MODEL_SIZE, "model sizes (dimensions, layers, attention heads) must be positive")
    check_precision(cfg.common, on_cpu)
    check_distributed_backend(cfg.distributed_training, on_cpu)
    check_process_group_size(cfg.distributed_training)
    check_fully_sharded(cfg.distributed_training)
    if cli in TRAINING_CLIS:
        check_restore_file(cfg.checkpoint, cfg.distributed_training)


def task_data_needs(task_name):
    """The DataNeeds of a registered task, or None (a task that declares nothing is not checked)."""
    return getattr(TASK_REGISTRY.get(task_name), "data_needs", None) or FAIRSEQ_TASK_NEEDS.get(task_name)


def splits_loaded(cli: str, dataset_cfg) -> list:
    """The splits the CLI loads before it trains or evaluates."""
    if cli in TRAINING_CLIS:
        valid = [] if dataset_cfg.disable_validation else dataset_cfg.valid_subset.split(",")
        return [dataset_cfg.train_subset, *valid]
    if cli == "fairseq_cli.eval_lm":
        return [dataset_cfg.gen_subset]
    return []


def check_data_dirs(task_cfg, dataset_cfg, splits) -> None:
    task_options = config_values(task_cfg)
    data = task_options.get("data")
    if not data or "://" in data:  # remote paths are fairseq's PathManager's business
        return
    paths = data.split(os.pathsep)
    for path in paths:
        if not os.path.isdir(path):
            raise BadInput(f"data directory {path!r} does not exist")
    needs = task_data_needs(task_options.get("_name", task_options.get("task")))
    if needs is None:
        return
    for dictionary in needs.dictionaries(paths[0], task_options):
        if not os.path.isfile(os.path.join(paths[0], dictionary)):
            raise BadInput(
                f"data directory {paths[0]!r} has no dictionary ({dictionary}): it is not a binarized "
                "data directory; build one with normformer-build-corpus or fairseq-preprocess"
            )
    if dataset_cfg.dataset_impl == "raw":  # text files, no .bin/.idx
        return
    for split in splits:
        for path in paths if split == dataset_cfg.train_subset else paths[:1]:  # train: one directory an epoch
            for prefix in needs.split_prefixes(path, split, task_options):
                check_binarized(os.path.join(path, prefix), split)


def check_shared_dictionary(task_cfg, model_cfg) -> None:
    """fairseq reports --share-all-embeddings with two different dictionaries only once the task is set up
    ("requires a joined dictionary"), without naming them."""
    task_options = config_values(task_cfg)
    needs = task_data_needs(task_options.get("_name", task_options.get("task")))
    data = task_options.get("data")
    if not data or "://" in data or not isinstance(needs, LanguagePairNeeds):
        return
    if not config_values(model_cfg).get("share_all_embeddings"):
        return
    data_dir = data.split(os.pathsep)[0]
    names = needs.dictionaries(data_dir, task_options)
    src_dict, tgt_dict = (Dictionary.load(os.path.join(data_dir, name)) for name in names)
    if src_dict != tgt_dict:
        raise BadInput(
            f"--share-all-embeddings needs one dictionary for both languages, but {names[0]} ({len(src_dict)} "
            f"symbols) and {names[1]} ({len(tgt_dict)} symbols) of {data_dir!r} differ: binarize with "
            "fairseq-preprocess --joined-dictionary, or drop --share-all-embeddings"
        )


def check_binarized(prefix: str, split: str) -> None:
    """fairseq reports a missing split as "Dataset not found" once the model is built, and an empty one
    as "cannot mmap an empty file" followed by an AttributeError from MMapIndexedDataset.__del__."""
    for path in (prefix + ".idx", prefix + ".bin"):
        problem = "does not exist" if not os.path.isfile(path) else "is empty" if os.path.getsize(path) == 0 else None
        if problem:
            raise BadInput(f"data file {path!r} of split {split!r} {problem}: {REBUILD}")


def config_values(cfg) -> dict:
    """{option: value} of a config section, an argparse.Namespace (argparse-configured models) or an
    OmegaConf node (dataclass-configured), interpolations resolved."""
    if cfg is None:
        return {}
    if isinstance(cfg, argparse.Namespace):
        return vars(cfg)
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)


def check_positive(cfg, names: re.Pattern, rule: str) -> None:
    for name, value in config_values(cfg).items():
        if names.fullmatch(name) and isinstance(value, int) and not isinstance(value, bool) and value <= 0:
            raise BadInput(f"--{name.replace('_', '-')} {value}: {rule}")


RESET_FLAGS = ("reset_optimizer", "reset_dataloader", "reset_meters", "reset_lr_scheduler")


def check_restore_file(checkpoint_cfg, dist_cfg) -> None:
    """fairseq trains from scratch, with an info line, when --restore-file names no file (with
    --use-sharded-state, rank r reads <name>-shard<r>.pt: the first shard is checked). So it does here
    (fairseq's own tests name a missing x.pt to start afresh), with a warning line; but --reset-* flags
    ask for a checkpoint's weights (fine-tuning), so a missing file with them is refused."""
    restore = checkpoint_cfg.restore_file
    if restore == "checkpoint_last.pt" or "://" in restore:
        return
    if dist_cfg.ddp_backend == "fully_sharded" and dist_cfg.use_sharded_state:
        restore = restore.replace(".pt", "-shard0.pt")
    if os.path.isfile(restore):
        return
    resets = [f"--{name.replace('_', '-')}" for name in RESET_FLAGS if getattr(checkpoint_cfg, name)]
    if resets:
        raise BadInput(f"--restore-file {restore!r} does not exist (with {' '.join(resets)}, which start from its "
                       "weights): fairseq would train from scratch")
    print(f"{os.path.basename(sys.argv[0])}: warning: --restore-file {restore!r} does not exist: training from scratch, as fairseq does",
          file=sys.stderr, flush=True)  # fmt: skip


def check_precision(common_cfg, on_cpu: bool) -> None:
    if on_cpu and common_cfg.amp:
        raise BadInput(
            "--amp uses CUDA autocast, which does nothing on CPU (training would silently run in "
            "fp32): drop --amp, or use --bf16 for bfloat16 training on CPU"
        )


def check_fully_sharded(dist_cfg) -> None:
    """--ddp-backend fully_sharded needs fairscale (fairseq's own message says ``pip install fairscale``,
    which would replace torch); and fairseq builds the model in fp32 and then wraps it, while fairscale's
    FSDP wants fp16 weights for --memory-efficient-fp16 ("Expecting FP16 param type in pure FP16 mode").
    --cpu-offload is FSDP's (fairseq's Trainer raises with a traceback)."""
    if dist_cfg.ddp_backend != "fully_sharded":
        if dist_cfg.cpu_offload:
            raise BadInput("--cpu-offload offloads FSDP's shards: add --ddp-backend fully_sharded (one process or more)")
        return
    if importlib.util.find_spec("fairscale") is None:
        raise ValueError(
            "--ddp-backend fully_sharded needs fairscale: pip install --no-deps -r requirements/fsdp.txt "
            "(--no-deps keeps your torch)"
        )
    if dist_cfg.memory_efficient_fp16:
        raise ValueError(
            "--memory-efficient-fp16 does not work with --ddp-backend fully_sharded (fairseq wraps an fp32 model): "
            "use --fp16, which under fully_sharded keeps only fp32 shards and fairseq's memory-efficient fp16 optimizer"
        )


def check_distributed_backend(dist_cfg, on_cpu: bool) -> None:
    world_size = int(os.environ.get("WORLD_SIZE", dist_cfg.distributed_world_size))
    if on_cpu and world_size > 1 and dist_cfg.distributed_backend == "nccl":
        raise BadInput(
            "--distributed-backend nccl (fairseq's default) needs CUDA GPUs: "
            "pass --distributed-backend gloo to train on CPU"
        )


def check_process_group_size(dist_cfg) -> None:
    """One process of a group started by hand (--distributed-no-spawn with a tcp:// init method)
    must be told the group's size: fairseq's default, 1 without GPUs, made rank 0 train alone and
    exit 0 while the other ranks failed to connect."""
    world_size, rank = dist_cfg.distributed_world_size, dist_cfg.distributed_rank
    if not (dist_cfg.distributed_no_spawn and dist_cfg.distributed_init_method) or "WORLD_SIZE" in os.environ:
        return
    if world_size == 1 or rank >= world_size:
        raise ValueError(
            f"--distributed-rank {rank} of a process group started by hand (--distributed-no-spawn "
            f"--distributed-init-method) needs --distributed-world-size, the number of processes in all, "
            f"on every process (it is {world_size}: rank 0 would train alone)"
        )

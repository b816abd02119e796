"""Checkpoints that survive SIGKILL, name their corruption, and know their dictionary.

None of these fixes depends on the device: they change how checkpoint files are written and
checked, never what is in a model, an optimizer or a training step. Their I/O costs (an fsync per
write, a CRC read per load, a dictionary fingerprint written and checked) are turned off with
NORMFORMER_CHECKPOINT_CHECKS=0, read at every save and load (docs/fixes.md).
"""
import hashlib
import os
import pickle
import shutil
import zipfile

import torch
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager
from fairseq.trainer import Trainer

from ..checks import UNDO_ON_BAD_INPUT, BadInput

_fairseq_persistent_save = checkpoint_utils.torch_persistent_save
_fairseq_load_checkpoint_to_cpu = checkpoint_utils.load_checkpoint_to_cpu
_fairseq_load_model_ensemble_and_task = checkpoint_utils.load_model_ensemble_and_task
_fairseq_trainer_state_dict = Trainer.state_dict
_fairseq_trainer_load_checkpoint = Trainer.load_checkpoint

CHECKS_SWITCH = "NORMFORMER_CHECKPOINT_CHECKS"


def checkpoint_checks_on() -> bool:
    """The switch: 1 (the default) or 0, read where a checkpoint is written or loaded (and by the
    command-line checks, so that a bad value stops a run before it starts)."""
    value = os.environ.get(CHECKS_SWITCH, "1")
    if value not in ("0", "1"):
        raise BadInput(f"{CHECKS_SWITCH} must be 1 (the default) or 0, not {value!r}")
    return value == "1"


# --- atomic writes --------------------------------------------------------------------------------
def write_atomically(path: str, write, durable: bool = True) -> None:
    """``write(file)`` fills a temporary file next to ``path``, which then replaces ``path`` in one
    step: a reader (or a resume after SIGKILL) sees the old file or the new one, never a part of
    one. ``durable`` fsyncs the file and the rename, so that this holds after a power loss too."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        write(f)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if not durable:
        return
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def torch_persistent_save(obj, filename, async_write: bool = False):
    """fairseq's save renames a temp file into place without fsync (a crash can leave an empty
    file). Local files here go through write_atomically; async and remote writes stay fairseq's, and
    so does every write with the checks off."""
    if async_write or PathManager.path_requires_pathmanager(filename) or not checkpoint_checks_on():
        return _fairseq_persistent_save(obj, filename, async_write)
    write_atomically(filename, lambda f: torch.save(obj, f))


class AtomicCopyPathManager(PathManager):
    """save_checkpoint writes one checkpoint, then *copies* it to checkpoint_last.pt (and
    checkpoint_best.pt) with shutil.copyfile, which truncates the destination first: SIGKILL during
    the copy leaves a truncated checkpoint_last.pt, and the next run cannot resume. Local copies
    here go through write_atomically, without its fsyncs when the checks are off: a copy costs no
    more I/O than fairseq's, and only a power loss can still leave a truncated file."""

    @staticmethod
    def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        if PathManager.path_requires_pathmanager(dst_path):
            return PathManager.copy(src_path, dst_path, overwrite)
        with open(src_path, "rb") as src:
            write_atomically(dst_path, lambda dst: shutil.copyfileobj(src, dst), durable=checkpoint_checks_on())
        return True


# --- damaged checkpoints -------------------------------------------------------------------------
def checkpoint_damage(path: str):
    """What is wrong with a local checkpoint file, or None. torch.save writes a zip archive with a
    CRC per record, which torch.load does not check."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if not magic:
        return "the file is empty"
    if magic != b"PK\x03\x04":  # torch.save's zip archive, or its legacy format: a pickle (protocol >= 2)
        return None if magic[:1] == b"\x80" else "neither a zip archive nor a pickle: not a torch checkpoint"
    try:
        with zipfile.ZipFile(path) as archive:
            bad_record = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        return f"not a whole zip archive: {e}"
    return f"record {bad_record} fails its CRC check" if bad_record else None


def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
    """fairseq loads a checkpoint whose tensor bytes are damaged without a word, and reports a
    truncated one with torch's "PytorchStreamReader failed reading zip archive", which names
    neither the file nor the problem. Local files are checked first (one more read of the file)."""
    local = not PathManager.path_requires_pathmanager(path) and os.path.isfile(path)
    if local and checkpoint_checks_on():
        damage = checkpoint_damage(path)
        if damage:
            raise BadInput(
                f"checkpoint {path} is truncated or corrupt ({damage}). It was left as it is: resume "
                "from an intact checkpoint with --restore-file, or move it away"
            )
    try:
        return _fairseq_load_checkpoint_to_cpu(path, arg_overrides, load_on_all_ranks)
    except pickle.UnpicklingError as e:  # torch's message advises weights_only=False, unsafe for an unknown file
        reason = str(e).partition("WeightsUnpickler error:")[2].strip().split("\n")[0] or str(e).split("\n")[0]
        raise BadInput(f"checkpoint {path} cannot be read: {reason}") from None


# --- dictionaries ---------------------------------------------------------------------------------
def symbols_md5(symbols) -> str:
    return hashlib.md5("\n".join(symbols).encode("utf-8")).hexdigest()


def dictionary_fingerprints(task) -> dict:
    """{"source"/"target": {"size", "md5"}} of the task's dictionaries (md5 of the symbols in order); for a
    task with a dictionary per language (multilingual_translation, laser: ``task.dicts``, whose
    source/target_dictionary depend on the mode and the pair), {"language L": ...} of each."""
    languages = getattr(task, "dicts", None)
    named = {f"language {lang}": d for lang, d in languages.items()} if isinstance(languages, dict) else {
        side: getattr(task, f"{side}_dictionary", None) for side in ("source", "target")}
    return {name: {"size": len(d), "md5": symbols_md5(d.symbols)} for name, d in named.items() if d is not None}


# Symbols a task appends to the dictionary it reads (sentence_prediction and masked_lm add <mask>).
TASK_APPENDED_SYMBOLS = {"<mask>"}


def extends(task, side: str, expected: dict) -> bool:
    """The task's dictionary is the checkpoint's plus symbols the task appends itself (sentence_prediction
    appends <mask> to a causal LM's): every id the checkpoint knows means the same symbol. A data
    directory whose dict.txt has more symbols is still refused."""
    symbols = getattr(task, f"{side}_dictionary").symbols
    appended = symbols[expected["size"]:]
    return (
        bool(appended)
        and set(appended) <= TASK_APPENDED_SYMBOLS
        and symbols_md5(symbols[: expected["size"]]) == expected["md5"]
    )


def recorded_fingerprints(path: str):
    """The fingerprints a checkpoint was saved with, or None (an older or foreign checkpoint)."""
    try:  # mmap: reads the small pickled part, not the tensors
        state = torch.load(path, map_location="cpu", mmap=True)
    except Exception:  # unreadable: the load that follows (load_checkpoint_to_cpu) names the damage
        return None
    return state.get("extra_state", {}).get("dictionaries")


def task_data_dir(task) -> str:
    for cfg in (getattr(task, "cfg", None), getattr(task, "args", None)):  # FairseqTask, LegacyFairseqTask
        if getattr(cfg, "data", None):
            return cfg.data
    return "?"


def check_dictionaries(path: str, task) -> None:
    if not checkpoint_checks_on():
        return
    recorded = recorded_fingerprints(path)
    if recorded is None:
        return
    current = dictionary_fingerprints(task)
    one_dictionary = current.get("source") == current.get("target")  # language models
    for side, expected in recorded.items():
        found = current.get(side)
        if found is not None and found != expected and not (side in ("source", "target") and extends(task, side, expected)):
            name = "dictionary" if one_dictionary else f"{side} dictionary"
            change = "different symbols" if found["size"] == expected["size"] else f"{expected['size']} symbols"
            raise BadInput(
                f"the {name} of data directory {task_data_dir(task)!r} ({found['size']} symbols) does not "
                f"match the one checkpoint {path} was trained with ({change}): use the data "
                "directory the checkpoint was trained on"
            )


def trainer_state_dict(self):
    """Records the dictionaries' fingerprints in every checkpoint (fairseq records none, so resuming
    or evaluating with another dictionary of the same size silently scrambles the embeddings)."""
    state = _fairseq_trainer_state_dict(self)
    if checkpoint_checks_on():
        state["extra_state"]["dictionaries"] = dictionary_fingerprints(self.task)
    return state


def trainer_load_checkpoint(self, filename, *args, **kwargs):
    """On resume: a dictionary mismatch is named before fairseq's "size mismatch ... please ensure
    that the architectures match" (or, at equal sizes, no error at all)."""
    if self.data_parallel_rank == 0 and os.path.isfile(filename):
        check_dictionaries(filename, self.task)
    return _fairseq_trainer_load_checkpoint(self, filename, *args, **kwargs)


def load_model_ensemble_and_task(filenames, arg_overrides=None, task=None, *args, **kwargs):
    """On evaluation (fairseq-eval-lm, -interactive, -generate with --path): same check."""
    if task is not None:
        for filename in filenames:
            if os.path.isfile(filename):
                check_dictionaries(filename, task)
    return _fairseq_load_model_ensemble_and_task(filenames, arg_overrides, task, *args, **kwargs)



_fairseq_verify_checkpoint_directory = checkpoint_utils.verify_checkpoint_directory
CREATED_DIRECTORIES = []  # the save directory and the parents fairseq-train created, deepest first


def verify_checkpoint_directory(save_dir: str) -> None:
    """fairseq's (it creates the save directory), remembering the directories it created."""
    missing, path = [], os.path.abspath(save_dir)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    _fairseq_verify_checkpoint_directory(save_dir)
    CREATED_DIRECTORIES.extend(missing)


def remove_created_empty_directories() -> None:
    """A run refused for bad input leaves no save directory it created, as long as it is still empty."""
    for path in CREATED_DIRECTORIES:
        try:
            os.rmdir(path)  # only an empty directory
        except OSError:
            return


def undo_save_directory_on_bad_input() -> None:
    UNDO_ON_BAD_INPUT.append(remove_created_empty_directories)

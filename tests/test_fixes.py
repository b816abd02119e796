"""The fixes table (fairseq_normformer/fixes): what it lists is what is installed, once; the
NORMFORMER_CHECKPOINT_CHECKS switch in both states; fairseq's hydra warnings filtered, no others."""
import argparse
import importlib
import importlib.util
import os
import re
import warnings

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.trainer import Trainer
from hydra._internal import utils as hydra_utils
from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository
from hydra._internal.utils import create_config_search_path
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from fairseq_normformer import fixes
from fairseq_normformer.checks import BadInput
from fairseq_normformer.fixes import cpu_training
from fairseq_normformer.fixes.distributed import spawn_ranks
from fairseq_normformer.fixes.warning_filters import silence_fairseq_hydra_warnings

from .conftest import USER_DIR
from .distributed.fairseq_runs import common_args, model_weights, train

SWITCH = "NORMFORMER_CHECKPOINT_CHECKS"


def resolve(symbol: str):
    """``fairseq.trainer.Trainer.train_step`` -> the object it names now."""
    parts = symbol.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for part in parts[split:]:
            owner = getattr(owner, part)
        return owner
    raise ValueError(symbol)


def test_every_fix_is_installed_as_the_table_says():
    replaced = [name for fix in fixes.FIXES.values() for name in fix.replaces()]
    # twenty-six fairseq symbols, torch's init_process_group rendezvous, hydra's ConfigStore copy and its caller's
    # frame (two names); with fairscale installed eight more: five of fairscale's FSDP, torch's Tensor.record_stream,
    # fairseq's Trainer.clip_grad_norm and FullyShardedDataParallel.__init__
    assert len(replaced) == len(set(replaced)) == (38 if fixes.fairscale_fsdp else 30)  # each replaced by one fix
    for fix in fixes.FIXES.values():
        for name, (_, _, replacement) in zip(fix.replaces(), fix.replacements):
            assert resolve(name) is replacement, name
    assert fixes.applied()


def test_apply_twice_changes_nothing():
    installed = {name: resolve(name) for fix in fixes.FIXES.values() for name in fix.replaces()}
    fixes.apply()
    assert {name: resolve(name) for name in installed} == installed
    assert cpu_training._fairseq_call_main.__module__ == "fairseq.distributed.utils"  # fairseq's, not ours


@pytest.mark.parametrize("checks, fsyncs", [("1", 4), ("0", 0)])  # write: file + directory; copy: same
def test_checkpoint_writes_fsync_only_with_checks_on(checks, fsyncs, tmp_path, monkeypatch):
    monkeypatch.setenv(SWITCH, checks)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    state = {"weight": torch.arange(1000.0)}
    checkpoint_utils.torch_persistent_save(state, str(tmp_path / "checkpoint_1_1.pt"))
    checkpoint_utils.PathManager.copy(str(tmp_path / "checkpoint_1_1.pt"), str(tmp_path / "checkpoint_last.pt"))
    assert len(synced) == fsyncs
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint_1_1.pt", "checkpoint_last.pt"]
    assert torch.equal(torch.load(tmp_path / "checkpoint_last.pt")["weight"], state["weight"])


def fairseq_lm_args(data_bin, save_dir, *plugin) -> list:
    """fairseq's own transformer_lm, so that the same run works with and without the plugin."""
    return [data_bin, *plugin, "--task", "language_modeling", "--arch", "transformer_lm", "--decoder-layers", "1",
            "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4",
            "--tokens-per-sample", "32", "--max-update", "2", *common_args(save_dir)]  # fmt: skip


def fairseq_checkpoint(data_bin, tmp_path_factory, name, plugin=(), checks="1"):
    """checkpoint_last.pt of fairseq_lm_args's 2 updates, trained with NORMFORMER_CHECKPOINT_CHECKS=checks."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv(SWITCH, checks)
        save_dir = tmp_path_factory.mktemp(name.replace(" ", "_"))
        train(fairseq_lm_args(data_bin, save_dir, *plugin))
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def fairseq_alone(tiny_lm_corpus, tmp_path_factory):
    """The checkpoint of fairseq without the plugin."""
    return fairseq_checkpoint(tiny_lm_corpus.data_bin, tmp_path_factory, "fairseq")


@pytest.fixture(scope="module")
def with_checks(tiny_lm_corpus, tmp_path_factory):
    """The checkpoint of the same run with the plugin, its checks on (the default)."""
    return fairseq_checkpoint(tiny_lm_corpus.data_bin, tmp_path_factory, "checks on", ("--user-dir", USER_DIR))


@pytest.fixture(scope="module")
def checkpoints_by_switch(fairseq_alone, with_checks, tiny_lm_corpus, tmp_path_factory):
    """checkpoint_last.pt of the same 2 updates: fairseq alone, and with the plugin, checks on and off."""
    checks_off = fairseq_checkpoint(tiny_lm_corpus.data_bin, tmp_path_factory, "checks off", ("--user-dir", USER_DIR), "0")
    return {"fairseq": fairseq_alone, "checks on": with_checks, "checks off": checks_off}


@pytest.mark.slow
def test_checks_off_writes_checkpoints_as_fairseq_does(checkpoints_by_switch):
    states = {name: torch.load(path, map_location="cpu") for name, path in checkpoints_by_switch.items()}
    extra = {name: set(state["extra_state"]) for name, state in states.items()}
    assert extra["checks off"] == extra["fairseq"]
    assert extra["checks on"] == extra["fairseq"] | {"dictionaries", "optimizer_layout"}
    assert {name: set(state) for name, state in states.items()} == {name: set(states["fairseq"]) for name in states}
    fairseq_weights = model_weights(checkpoints_by_switch["fairseq"])
    for name in ("checks on", "checks off"):  # the same training either way
        weights = model_weights(checkpoints_by_switch[name])
        assert all(torch.equal(weights[key], fairseq_weights[key]) for key in fairseq_weights)


def lm_trainer(data_bin) -> Trainer:
    """fairseq-train's Trainer (fairseq's transformer_lm, batches of 16 blocks of 32 tokens, the default
    --required-batch-size-multiple 8), built in this process as fairseq_cli.train builds it."""
    argv = [str(a) for a in fairseq_lm_args(data_bin, "unused")]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    cfg.dataset.batch_size = cfg.dataset.batch_size_valid = 16
    task = tasks.setup_task(cfg.task)
    task.load_dataset("valid")
    return Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))


def batched_examples(iterator) -> list:
    return sorted(int(i) for batch in iterator.frozen_batches for i in batch)


def test_validation_batches_every_example_training_keeps_fairseqs_batches(tiny_lm_corpus):
    trainer = lm_trainer(tiny_lm_corpus.data_bin)
    train, valid = trainer.get_train_iterator(epoch=1), trainer.get_valid_iterator("valid")
    n_train, n_valid = len(trainer.task.dataset("train")), len(trainer.task.dataset("valid"))
    assert n_train % 8 and n_valid % 8  # fairseq drops the last n % 8 examples of each
    assert batched_examples(valid) == list(range(n_valid))
    assert [len(batch) for batch in valid.frozen_batches][-1] == n_valid % 8
    # training: fairseq's rule, batch sizes a multiple of 8 and the last n % 8 examples dropped
    assert all(len(batch) % 8 == 0 for batch in train.frozen_batches)
    assert len(batched_examples(train)) == n_train - n_train % 8


def flip_bits_in_the_middle(path, copy):
    content = bytearray(path.read_bytes())
    middle = len(content) // 2
    content[middle : middle + 64] = bytes(b ^ 0xFF for b in content[middle : middle + 64])
    copy.write_bytes(bytes(content))
    return str(copy)


@pytest.mark.slow
@pytest.mark.parametrize("checks", ["1", "0"])
def test_damaged_checkpoint_is_named_only_with_checks_on(checks, fairseq_alone, tmp_path, monkeypatch):
    """What turning the checks off loses: a checkpoint whose tensor bytes were damaged on disk (a
    record failing its CRC) loads without a word."""
    damaged = flip_bits_in_the_middle(fairseq_alone, tmp_path / "damaged.pt")
    monkeypatch.setenv(SWITCH, checks)
    if checks == "1":
        with pytest.raises(BadInput, match=r"checkpoint .*damaged.pt is truncated or corrupt \(record .* CRC"):
            checkpoint_utils.load_checkpoint_to_cpu(damaged)
    else:
        assert checkpoint_utils.load_checkpoint_to_cpu(damaged)["optimizer_history"]


def hydra_warnings_of_fairseqs_config(silenced: bool) -> list:
    """The warnings fairseq-train's conversion of its arguments to a config raises (every warning
    recorded, whatever was shown before), with or without the filters of the hydra_warnings fix."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["data", "--task", "language_modeling", "--arch", "transformer_lm"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        if silenced:
            silence_fairseq_hydra_warnings()
        convert_namespace_to_omegaconf(args)
        warnings.warn("a warning of the user's own", UserWarning)
    return [str(warning.message) for warning in caught]


def test_only_fairseqs_hydra_warnings_are_silenced():
    unfiltered = hydra_warnings_of_fairseqs_config(silenced=False)
    assert sum("hydra" in message.lower() or "deprecated" in message for message in unfiltered) >= 5
    assert hydra_warnings_of_fairseqs_config(silenced=True) == ["a warning of the user's own"]


def test_composition_copies_no_config_store_and_composes_what_hydra_does(monkeypatch):
    """config_store_copy: the repository hydra copies at each composition reads the store itself, so a config
    stored after the copy is found (as hydra's main branch: its PR 2928 test), and fairseq's config is the same."""
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data", "--user-dir", str(USER_DIR), "--task", "language_modeling", "--arch", "normformer_lm", "--scale-heads",
        "--optimizer", "adam", "--lr-scheduler", "inverse_sqrt"])  # fmt: skip
    composed = OmegaConf.to_container(convert_namespace_to_omegaconf(args))
    repository = CachingConfigRepository(ConfigRepository(create_config_search_path(None)))
    ConfigStore.instance().store(name="stored_after_the_copy", node={"stored": "late"})
    try:
        assert repository.load_config("stored_after_the_copy").config == {"stored": "late"}
    finally:
        del ConfigStore.instance().repo["stored_after_the_copy.yaml"]
    monkeypatch.delattr(ConfigStore, "__deepcopy__")
    assert OmegaConf.to_container(convert_namespace_to_omegaconf(args)) == composed


def hydras_own(function_name: str):
    """hydra's function as hydra ships it (the plugin replaced it): hydra/_internal/utils.py loaded again."""
    spec = importlib.util.spec_from_file_location("hydra_utils_as_shipped", hydra_utils.__file__)
    shipped = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shipped)
    return getattr(shipped, function_name)


def caller_of_both(detectors, depth=1):
    """What each detector finds ``depth`` frames above this function (hydra's stack_depth + 1), called from here."""
    hydras, ours = detectors
    return [hydras(depth + 1), ours(depth + 1)]


class Caller:
    def method(self, detectors):
        return caller_of_both(detectors)


@pytest.mark.parametrize("module_override", [None, "my_app.main"])
def test_hydra_finds_its_callers_file_and_module_as_its_own_function_does(monkeypatch, module_override):
    """hydra_caller_frame: the file and module hydra's initialize() reads of its caller, found from that frame alone,
    are those hydra's inspect.stack() finds: a module's function, a method, a nested function (no module), code of
    no file (exec'd), a caller two frames up, with and without HYDRA_MAIN_MODULE."""
    if module_override:
        monkeypatch.setenv("HYDRA_MAIN_MODULE", module_override)
    detectors = [hydras_own("detect_calling_file_or_module_from_stack_frame"),
                 hydra_utils.detect_calling_file_or_module_from_stack_frame]  # fmt: skip

    def nested():
        return caller_of_both(detectors)

    exec_globals = {"caller_of_both": caller_of_both, "detectors": detectors}
    exec("found = caller_of_both(detectors)", exec_globals)
    cases = {"function": caller_of_both(detectors), "method": Caller().method(detectors), "nested": nested(),
             "exec": exec_globals["found"], "two up": (lambda: caller_of_both(detectors, depth=2))()}  # fmt: skip
    for name, (hydras, ours) in cases.items():
        assert ours == hydras, name
    assert cases["function"][1] == (__file__, module_override or __name__)
    assert cases["exec"][1] == ("<string>", module_override)
    assert cases["nested"][1] == (__file__, module_override)


@pytest.mark.parametrize("first_byte, reason", [
    (0x42, r"neither a zip archive nor a pickle: not a torch checkpoint"),  # random bytes
    (0x80, r"cannot be read: Unsupported operand"),  # a pickle's first byte: torch's unpickler refuses the rest
])  # fmt: skip
def test_a_file_torch_cannot_read_is_one_line_without_torchs_weights_only_advice(first_byte, reason, tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(bytes([first_byte, 0x2A]) + bytes(range(256)) * 4)
    with pytest.raises(BadInput, match=rf"^checkpoint {re.escape(str(path))} .*{reason}") as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert "weights_only" not in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.slow
def test_train_main_takes_a_namespace_as_fairseqs_does(tiny_lm_corpus, with_checks, tmp_path):
    """fairseq's train.main converts an argparse.Namespace itself (fairseq's test_binaries call it so);
    save-on-signal's wrapper did not, and stopped with "'Namespace' object has no attribute 'checkpoint'".
    In this process the plugin is loaded: the run equals fairseq-train's with the plugin."""
    from fairseq_cli import train as fairseq_train

    argv = [str(a) for a in fairseq_lm_args(tiny_lm_corpus.data_bin, tmp_path, "--user-dir", USER_DIR)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the process (OMP_NUM_THREADS=1): a sum over 2 threads rounds otherwise
    try:
        fairseq_train.main(options.parse_args_and_arch(options.get_training_parser(), argv))
    finally:
        torch.set_num_threads(threads)
    weights, cli_weights = model_weights(tmp_path / "checkpoint_last.pt"), model_weights(with_checks)
    assert weights.keys() == cli_weights.keys() and all(torch.equal(weights[k], cli_weights[k]) for k in weights)


def test_a_task_with_a_dictionary_per_language_is_fingerprinted_by_language():
    """multilingual_translation's source/target_dictionary is the first language's while training and the
    pair's while generating: fingerprints by side refused fairseq's own test_multilingual_transformer."""
    from fairseq.data import Dictionary
    from fairseq.tasks.multilingual_translation import MultilingualTranslationTask

    from fairseq_normformer.fixes.checkpoints import dictionary_fingerprints, symbols_md5

    dicts = {"de": Dictionary(), "en": Dictionary()}
    dicts["de"].add_symbol("hallo")
    args = argparse.Namespace(lang_pairs=["de-en"], source_lang="de", target_lang="en")
    training, generating = (MultilingualTranslationTask(args, dicts, mode) for mode in (True, False))
    assert training.target_dictionary is not generating.target_dictionary  # why sides cannot be compared
    expected = {f"language {lang}": {"size": len(d), "md5": symbols_md5(d.symbols)} for lang, d in dicts.items()}
    assert dictionary_fingerprints(training) == dictionary_fingerprints(generating) == expected


def write_thread_count(rank: int, out_dir) -> None:
    (out_dir / str(rank)).write_text(str(torch.get_num_threads()))


def test_forked_ranks_take_omp_num_threads_as_new_processes(tmp_path, monkeypatch):
    """fairseq-train's ranks on CPU are forked (spawn_ranks): each takes OMP_NUM_THREADS threads, as a new process
    reads them at start-up, not its parent's count (the order of float sums, so the numbers)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        spawn_ranks(None, fn=write_thread_count, args=(tmp_path,), nprocs=2)
    finally:
        torch.set_num_threads(threads)
    assert [(tmp_path / str(rank)).read_text() for rank in range(2)] == ["1", "1"]

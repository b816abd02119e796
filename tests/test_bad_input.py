"""Bad input meets an error that names the problem, and leaves existing checkpoints untouched.

The CLIs' entry points (fairseq_cli's cli_main) run in this process: each case fails before
training, and the exception (checks.BadInput) is the one line the CLI prints (checked for real in a few fairseq-train
processes, forked: tests/distributed/fork_server.py).
"""
import re
import shutil
import sys

import pytest
import torch
from fairseq_cli import eval_lm, train

from fairseq_normformer.checks import BadInput

from .conftest import USER_DIR
from .distributed import fairseq_runs
from .distributed.fairseq_runs import common_args, logged_updates, tiny_bert_args, tiny_lm_args, train_in_process

OTHER_DICTIONARY = r"dictionary of data directory '.*other-data' .* does not match .*checkpoint_last.pt"


def run_in_process(cli_main, argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fairseq-cli", *map(str, argv)])
    cli_main()


def lm_args(data_bin, save_dir, *extra):
    return tiny_lm_args(data_bin, save_dir, "--max-update", "2", *extra)


def eval_lm_args(data_bin, checkpoint):
    return [data_bin, "--path", checkpoint, "--user-dir", USER_DIR, "--cpu", "--batch-size", "2",
            "--tokens-per-sample", "32"]  # fmt: skip


def snapshot(directory) -> dict:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def trained(tiny_lm_corpus, tmp_path_factory):
    """A save dir with the checkpoints of 2 updates."""
    save_dir = tmp_path_factory.mktemp("trained")
    train_in_process(lm_args(tiny_lm_corpus.data_bin, save_dir))
    return save_dir


@pytest.fixture
def save_dir(trained, tmp_path):
    """A copy of ``trained``: what a failed run must leave as it found it."""
    return shutil.copytree(trained, tmp_path / "checkpoints")


def linked_data_dir(data_bin, target, but=()):
    """A copy of ``data_bin`` whose files are links, except those named in ``but`` (left out)."""
    target.mkdir(parents=True)
    for path in data_bin.iterdir():
        if path.name not in but:
            (target / path.name).symlink_to(path)
    return target


def data_dir_with_dictionary(data_bin, target, edit):
    """A copy of ``data_bin`` (the binarized data linked) whose dict.txt lines went through ``edit``."""
    linked_data_dir(data_bin, target, but=("dict.txt",))
    lines = (data_bin / "dict.txt").read_text().splitlines(keepends=True)
    (target / "dict.txt").write_text("".join(edit(lines)))
    return target


def swap_first_two(lines):  # same size, two symbols exchanged: fairseq would load it silently
    return [lines[1], lines[0], *lines[2:]]


def add_symbol(lines):  # one more symbol: fairseq reports "size mismatch ... architectures match"
    return [*lines, "extra-symbol 1\n"]


@pytest.mark.slow
def test_missing_data_directory_is_named_by_the_cli(tmp_path):
    args = [tmp_path / "no-such-dir", "--user-dir", USER_DIR, "--task", "language_modeling", "--arch", "normformer_lm",
            "--batch-size", "2", "--optimizer", "adam", "--cpu"]  # fmt: skip
    result = fairseq_runs.train(args, check=False)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == f"fairseq-train: error: data directory '{tmp_path / 'no-such-dir'}' does not exist"
    assert "Traceback" not in result.stderr  # checks.BadInput: one line
    assert not re.search("hydra|deprecat", result.stderr, re.IGNORECASE)  # fairseq's noise, silenced


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a machine without a CUDA GPU")
@pytest.mark.slow
def test_triton_layernorm_without_a_cuda_gpu_is_one_line(tiny_lm_corpus, tmp_path):
    """Issue 53: a 39-line traceback ending in ValueError."""
    args = lm_args(tiny_lm_corpus.data_bin, tmp_path / "save", "--layernorm-impl", "triton")
    result = fairseq_runs.train(args, check=False)
    assert (result.returncode, result.stderr) == (
        1, "fairseq-train: error: --layernorm-impl=triton needs a CUDA GPU; use --layernorm-impl=torch or auto here\n")
    assert not (tmp_path / "save").exists()


def test_data_directory_without_dictionary(tiny_lm_corpus, tmp_path, monkeypatch):
    no_dict = tmp_path / "raw-text"
    no_dict.mkdir()
    (no_dict / "train.txt").write_text("some raw text\n")
    with pytest.raises(ValueError, match=r"data directory '.*raw-text' has no dictionary \(dict.txt\)"):
        run_in_process(train.cli_main, lm_args(no_dict, tmp_path / "save"), monkeypatch)


def test_unknown_preset_is_named(tiny_lm_corpus, tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        args = lm_args(tiny_lm_corpus.data_bin, tmp_path, "--arch", "normformer_lm_gpt3_tiny")
        run_in_process(train.cli_main, args, monkeypatch)
    assert "invalid choice: 'normformer_lm_gpt3_tiny'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "switches, message",
    [
        (["--amp"], "--amp uses CUDA autocast, which does nothing on CPU"),
        (["--distributed-world-size", "2"], "--distributed-backend nccl .* needs CUDA GPUs"),
        (["--distributed-no-spawn", "--distributed-rank", "1", "--distributed-init-method", "tcp://127.0.0.1:1"],
         "--distributed-rank 1 of a process group started by hand .* needs --distributed-world-size"),
    ],
)
def test_switches_that_cannot_work_on_cpu(switches, message, tiny_lm_corpus, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=message):
        run_in_process(train.cli_main, lm_args(tiny_lm_corpus.data_bin, tmp_path, *switches), monkeypatch)


@pytest.mark.parametrize("edit", [swap_first_two, add_symbol])
@pytest.mark.slow
def test_resume_with_another_dictionary(edit, save_dir, tiny_lm_corpus, tmp_path, monkeypatch):
    other = data_dir_with_dictionary(tiny_lm_corpus.data_bin, tmp_path / "other-data", edit)
    before = snapshot(save_dir)
    with pytest.raises(ValueError, match=OTHER_DICTIONARY):
        run_in_process(train.cli_main, lm_args(other, save_dir, "--max-update", "3"), monkeypatch)
    assert snapshot(save_dir) == before


@pytest.mark.parametrize("edit", [swap_first_two, add_symbol])
def test_evaluate_with_another_dictionary(edit, save_dir, tiny_lm_corpus, tmp_path, monkeypatch):
    other = data_dir_with_dictionary(tiny_lm_corpus.data_bin, tmp_path / "other-data", edit)
    before = snapshot(save_dir)
    with pytest.raises(ValueError, match=OTHER_DICTIONARY):
        run_in_process(eval_lm.cli_main, eval_lm_args(other, save_dir / "checkpoint_last.pt"), monkeypatch)
    assert snapshot(save_dir) == before


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_restore_file_truncated_is_refused(save_dir, tiny_lm_corpus, monkeypatch):
    """The user named it: refused, not replaced (an unreadable checkpoint_last is healed: tests/test_resume.py)."""
    truncate(save_dir / "checkpoint_1_1.pt")
    before = snapshot(save_dir)
    with pytest.raises(BadInput, match=r"checkpoint .*checkpoint_1_1.pt is truncated or corrupt"):
        args = lm_args(tiny_lm_corpus.data_bin, save_dir, "--max-update", "3", "--restore-file",
                       save_dir / "checkpoint_1_1.pt")  # fmt: skip
        run_in_process(train.cli_main, args, monkeypatch)
    assert snapshot(save_dir) == before


@pytest.mark.slow
def test_truncated_checkpoint_is_one_line_from_the_cli(save_dir, tiny_lm_corpus):
    truncate(save_dir / "checkpoint_1_1.pt")
    before = snapshot(save_dir)
    truncated = save_dir / "checkpoint_1_1.pt"
    args = lm_args(tiny_lm_corpus.data_bin, save_dir, "--max-update", "3", "--restore-file", truncated)
    result = fairseq_runs.train(args, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert re.fullmatch(r"fairseq-train: error: checkpoint .*checkpoint_1_1.pt is truncated or corrupt \(.*\)\. "
                        r"It was left as it is: .*", result.stderr.strip().splitlines()[-1])  # fmt: skip
    assert snapshot(save_dir) == before


def test_evaluate_corrupt_checkpoint(save_dir, tiny_lm_corpus, monkeypatch):
    checkpoint = save_dir / "checkpoint_1_1.pt"
    content = bytearray(checkpoint.read_bytes())
    middle = len(content) // 2
    content[middle : middle + 64] = bytes(b ^ 0xFF for b in content[middle : middle + 64])  # flipped bits
    checkpoint.write_bytes(bytes(content))  # torch.load alone would load it without a word
    before = snapshot(save_dir)
    with pytest.raises(BadInput, match=r"checkpoint .*checkpoint_1_1.pt is truncated or corrupt"):
        run_in_process(eval_lm.cli_main, eval_lm_args(tiny_lm_corpus.data_bin, checkpoint), monkeypatch)
    assert snapshot(save_dir) == before


REBUILD = "rebuild the data directory with normformer-build-corpus or fairseq-preprocess"
TASK_ARGS = {  # the last --task/--criterion on a command line wins
    "language_modeling": lambda data, save_dir: lm_args(data, save_dir),
    "language_modeling_analysis": lambda data, save_dir: lm_args(data, save_dir, "--task", "language_modeling_analysis"),
    "masked_lm": lambda data, save_dir: tiny_bert_args(data, save_dir, "--task", "masked_lm", "--criterion", "masked_lm"),
    "mlm_nsp": lambda data, save_dir: tiny_bert_args(data, save_dir),
}  # fmt: skip


def fails_and_changes_nothing(cli_main, args, message, directories, monkeypatch):
    before = [snapshot(directory) for directory in directories]
    with pytest.raises(ValueError, match=message):
        run_in_process(cli_main, args, monkeypatch)
    assert [snapshot(directory) for directory in directories] == before


@pytest.mark.parametrize("task", TASK_ARGS)
def test_empty_training_data(task, save_dir, tiny_lm_corpus, tmp_path, monkeypatch):
    """fairseq: "ValueError: cannot mmap an empty file", then an AttributeError from MMapIndexedDataset.__del__."""
    data = linked_data_dir(tiny_lm_corpus.data_bin, tmp_path / "data", but=("train.bin",))
    (data / "train.bin").write_bytes(b"")
    message = re.escape(f"data file '{data / 'train.bin'}' of split 'train' is empty: {REBUILD}")
    fails_and_changes_nothing(train.cli_main, TASK_ARGS[task](data, save_dir), message, [save_dir, data], monkeypatch)


def test_missing_validation_data(save_dir, tiny_lm_corpus, tmp_path, monkeypatch):
    """Checked before the model is built (fairseq: "Dataset not found: valid" after building it)."""
    data = linked_data_dir(tiny_lm_corpus.data_bin, tmp_path / "data", but=("valid.bin", "valid.idx"))
    args = [arg for arg in lm_args(data, save_dir) if arg != "--disable-validation"]
    message = re.escape(f"data file '{data / 'valid.idx'}' of split 'valid' does not exist: {REBUILD}")
    fails_and_changes_nothing(train.cli_main, args, message, [save_dir, data], monkeypatch)


def test_sentence_prediction_without_its_inputs(save_dir, tiny_lm_corpus, tmp_path, monkeypatch):
    data = tmp_path / "glue-task"
    linked_data_dir(tiny_lm_corpus.data_bin, data / "input0", but=("train.bin", "train.idx"))
    args = [data, "--user-dir", USER_DIR, "--task", "sentence_prediction", "--criterion", "sentence_prediction",
            "--arch", "normformer_roberta_base", "--num-classes", "2", *common_args(save_dir)]  # fmt: skip
    message = re.escape(f"data file '{data / 'input0' / 'train.idx'}' of split 'train' does not exist: {REBUILD}")
    fails_and_changes_nothing(train.cli_main, args, message, [save_dir, data / "input0"], monkeypatch)


MODEL_SIZES = "model sizes \\(dimensions, layers, attention heads\\) must be positive"


@pytest.mark.parametrize(
    "model_args, switch, value, rule",
    [
        (lm_args, "--decoder-embed-dim", 0, MODEL_SIZES),  # fairseq: ZeroDivisionError in Embedding
        (lm_args, "--decoder-ffn-embed-dim", 0, MODEL_SIZES),
        (lm_args, "--decoder-layers", 0, MODEL_SIZES),
        (lm_args, "--decoder-attention-heads", -4, MODEL_SIZES),
        (tiny_bert_args, "--encoder-embed-dim", 0, MODEL_SIZES),
        (tiny_bert_args, "--encoder-ffn-embed-dim", -1, MODEL_SIZES),
        (tiny_bert_args, "--encoder-layers", 0, MODEL_SIZES),
        (tiny_bert_args, "--encoder-attention-heads", 0, MODEL_SIZES),
        (lm_args, "--tokens-per-sample", 0, "must be positive"),  # fairseq: ZeroDivisionError blocking the data
    ],
)
def test_sizes_must_be_positive(model_args, switch, value, rule, save_dir, tiny_lm_corpus, monkeypatch):
    args = model_args(tiny_lm_corpus.data_bin, save_dir, switch, value)
    message = f"^{switch} {value}: {rule}$"
    fails_and_changes_nothing(train.cli_main, args, message, [save_dir], monkeypatch)


def test_missing_restore_file_to_fine_tune_from(save_dir, tiny_lm_corpus, tmp_path, monkeypatch):
    """fairseq logs "No existing checkpoint found" and trains from scratch, also with --reset-* flags."""
    missing = tmp_path / "pretrained" / "checkpoint_best.pt"
    args = lm_args(tiny_lm_corpus.data_bin, save_dir, "--restore-file", missing, "--reset-optimizer", "--reset-meters")
    message = re.escape(f"--restore-file '{missing}' does not exist (with --reset-optimizer --reset-meters, which "
                        "start from its weights): fairseq would train from scratch")
    fails_and_changes_nothing(train.cli_main, args, message, [save_dir], monkeypatch)


@pytest.mark.slow
def test_missing_restore_file_alone_trains_from_scratch_as_fairseq(tiny_lm_corpus, tmp_path):
    """fairseq's own tests (TestActivationCheckpointing) name a missing x.pt to start afresh: kept, with a line."""
    missing = tmp_path / "x.pt"
    log = train_in_process(lm_args(tiny_lm_corpus.data_bin, tmp_path / "save", "--max-update", "1",
                                   "--restore-file", missing))  # fmt: skip
    assert f"warning: --restore-file '{missing}' does not exist: training from scratch, as fairseq does" in log.stderr
    assert f"No existing checkpoint found {missing}" in log.stdout + log.stderr
    assert list(logged_updates(log.stdout)) == [1]


def test_bad_checkpoint_checks_switch(save_dir, tiny_lm_corpus, monkeypatch):
    monkeypatch.setenv("NORMFORMER_CHECKPOINT_CHECKS", "off")
    args = lm_args(tiny_lm_corpus.data_bin, save_dir, "--max-update", "3")
    message = re.escape("NORMFORMER_CHECKPOINT_CHECKS must be 1 (the default) or 0, not 'off'")
    fails_and_changes_nothing(train.cli_main, args, message, [save_dir], monkeypatch)


@pytest.fixture(scope="module")
def pretrained_bert(tiny_bert_corpus, tmp_path_factory):
    """flags -> the save dir of a BERT pre-trained 1 update with them (each trained once; copy it to resume)."""
    runs = {}

    def pretrained(flags: tuple):
        if flags not in runs:
            runs[flags] = tmp_path_factory.mktemp("pretrained")
            train_in_process(tiny_bert_args(tiny_bert_corpus.data_bin, runs[flags], "--max-update", "1", *flags))
        return runs[flags]

    return pretrained


@pytest.mark.parametrize(
    "pretrained, resumed, flag",
    [
        (["--no-layernorm-embedding"], ["--reset-optimizer"], "--no-layernorm-embedding"),
        ([], ["--reset-optimizer", "--no-layernorm-embedding"], "--layernorm-embedding"),
        (["--no-layernorm-embedding"], [], "--no-layernorm-embedding"),
    ],
    ids=["checkpoint-without", "model-without", "resumed-with-adam-state"],
)
@pytest.mark.slow
def test_embedding_layernorm_mismatch_is_one_line_naming_the_flag(pretrained, resumed, flag, pretrained_bert, tiny_bert_corpus,
                                                                tmp_path):
    """The BERT presets keep BERT's embedding LayerNorm: a checkpoint pre-trained without one (as they were
    before) restored into one with it, or the other way round, as fine-tuning does (--reset-optimizer) or as a
    resumed run does (whose Adam state is mapped by parameter name first: it named a parameter, not the flag);
    fairseq: "Exception: Cannot load model parameters from checkpoint" and a traceback."""
    save_dir = shutil.copytree(pretrained_bert(tuple(pretrained)), tmp_path / "pretrained")
    before = snapshot(save_dir)
    args = tiny_bert_args(tiny_bert_corpus.data_bin, save_dir, "--max-update", "2", *resumed)
    result = train_in_process(args, check=False)  # an exception, a traceback in a process, would raise
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    has = "has no" if flag == "--no-layernorm-embedding" else "has a"
    assert result.stderr.strip().splitlines()[-1].startswith(f"fairseq-train: error: the checkpoint {has} LayerNorm on the embeddings")
    assert result.stderr.strip().endswith(f"pass {flag}")
    assert snapshot(save_dir) == before

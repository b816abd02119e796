"""Shared fixtures: tiny standard-library and gettext corpora and a tiny pre-trained BERT checkpoint
(built once per session), ``run_cli`` (``printed_warnings`` for its in-process runs) and the tiny masked-LM
settings (``TINY``, ``TRAIN``, ``pretrain``)."""
import contextlib
import copy
import gc
import io
import logging
import os
import pickle
import re
import shlex
import signal
import subprocess
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
from filelock import FileLock  # a requirement of torch

from fairseq import checkpoint_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.logging import progress_bar

from fairseq_normformer.cli import script
from fairseq_normformer.corpus.gettext import build_translation_corpus
from fairseq_normformer.corpus.stdlib import build_corpus
from fairseq_normformer.fixes import batch_prefetch
from fairseq_normformer.fixes.warning_filters import silence_fairseq_hydra_warnings, silence_library_warnings
from fairseq_normformer.runs.run_dir import is_setting

from .distributed.fork_server import exit_status

REPO_ROOT = Path(__file__).resolve().parent.parent
USER_DIR = REPO_ROOT / "fairseq_normformer"  # for --user-dir
TINY_MAX_CHARS = 200_000
TINY_VOCAB_SIZE = 1000
TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "4"]  # fmt: skip
TRAIN = ["--batch-size", "16", "--optimizer", "adam", "--lr", "1e-3", "--num-workers", "0",
         "--log-format", "simple", "--log-interval", "1", "--cpu", "--seed", "1"]  # fmt: skip
VALID_LINE = re.compile(r"\| valid \| .*")
PYTHON_WARNING = re.compile(r"^.*:\d+: \w*Warning: .*$", re.M)  # warnings.formatwarning's "FILE:LINE: Category: message"


def python_warnings(*outputs) -> list:
    """The Python warnings printed in the ``outputs`` (a process's stdout and stderr, log files)."""
    return [line for text in outputs for line in PYTHON_WARNING.findall(text)]


PYTHON_DEFAULT_IGNORED = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@contextlib.contextmanager
def printed_warnings():
    """Inside, Python warnings are printed to ``sys.stderr`` (an in-process ``run_cli``'s captured stderr) under the
    filters of a new process of this environment (Python's defaults, then the plugin's fixes/warning_filters.py),
    not recorded under pytest's (pytest.ini ignores three categories): ``python_warnings`` reads an in-process run's
    output as a real process's. Only a real process prints the warnings of its start-up and imports."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for category in PYTHON_DEFAULT_IGNORED:
            warnings.simplefilter("ignore", category, append=True)
        silence_fairseq_hydra_warnings()
        silence_library_warnings()
        warnings.showwarning = print_warning
        yield


def print_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one pytest process per core (pytest-xdist): each, and every CLI it starts,
    # uses one thread, so the processes do not oversubscribe the cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


def pytest_collection_finish(session):
    """The test process's collections skip what the imports and the collection made (gc.freeze), and run every
    10,000 allocations instead of 700: the in-process runs allocate many short-lived cycles (omegaconf's config
    nodes point to their parents), and CPython's collections took 12% of the CPU of the model tests
    (docs/install.md). A process started from here (the fork servers' runs included) collects as any does."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])


def pytest_unconfigure(config):
    gc.unfreeze()  # the interpreter's end frees what it froze (else nanobind, triton's bindings, reports leaks)


# Folders whose files run first: make test hands each file to one of its two processes in the collected order, and
# a long multi-process file started last keeps one core busy while the other has nothing left to run.
FIRST_FOLDERS = ("distributed", "cli")


def pytest_collection_modifyitems(config, items):
    """The files of FIRST_FOLDERS first, in their order; tests marked ``cuda`` are skipped without a CUDA device
    (scripts/gpu/run.sh runs them on a GPU host)."""
    first = {folder: rank for rank, folder in enumerate(FIRST_FOLDERS)}
    items.sort(key=lambda item: first.get(item.path.parent.name, len(first)))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (docs/gpu.md)")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)


def run_cli(args, cwd=REPO_ROOT, timeout=300, env=None, input=None, process=False,
            check=True) -> subprocess.CompletedProcess:
    """Run the console script ``args[0]`` of this Python's environment (e.g. ``.venv/bin/fairseq-train``)
    and return its exit status, stdout and stderr; raise with them when it fails (``check``). ``env`` adds to (or
    overrides) the environment; ``input`` is fed to stdin. A Python console script runs in this process
    (``in_process``: no second start-up of torch and fairseq); ``process=True`` starts a real one, for a
    test about the process itself (its warnings, its start-up) or one that needs ``timeout``."""
    function = console_script(args[0]) if not process else None
    if function is None:
        cmd = [script(args[0])] + [str(a) for a in args[1:]]
        result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, **(env or {})}, input=input)  # fmt: skip
    else:
        result = in_process(function, [str(a) for a in args], cwd, env or {}, input)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(result.args)} exited with {result.returncode}\n"
            f"--- stdout ---\n{result.stdout[-8000:]}\n--- stderr ---\n{result.stderr[-8000:]}"
        )
    return result


def console_script(name: str):
    """The function of this environment's console script ``name`` (its entry point), or None."""
    found = [ep for ep in entry_points(group="console_scripts") if ep.name == name]
    return found[0].load() if found else None


def fairseq_config(args):
    """``convert_namespace_to_omegaconf(args)``, fairseq's step from the parsed command line to its config, as
    fairseq-train takes it; computed once per distinct command line in a test process (hydra composes the whole
    config, ~0.6 s, and model tests build many models) and copied, since callers may change it."""
    key = repr(sorted(vars(args).items()))
    if key not in _CONFIGS:
        _CONFIGS[key] = convert_namespace_to_omegaconf(copy.deepcopy(args))
    return copy.deepcopy(_CONFIGS[key])


_CONFIGS = {}


LOG_FORMAT = logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s", "%Y-%m-%d %H:%M:%S")


def in_process(main, argv, cwd, env, input) -> subprocess.CompletedProcess:
    """``main()``, a console script's function, as a new process would run it: sys.argv, the environment, the
    working directory and stdin set, torch's threads as OMP_NUM_THREADS sets them (the order of float sums), stdout
    and stderr captured, an uncaught exception handed to sys.excepthook (status 1), the log at INFO on stdout in
    fairseq's CLI format; all set back after, and the signal handlers the run installs (save-on-signal) too."""
    out, err = io.StringIO(), io.StringIO()
    log = logging.StreamHandler(out)
    log.setFormatter(LOG_FORMAT)
    root, saved_argv, saved_env = logging.getLogger(), sys.argv, dict(os.environ)
    saved_log, saved_stdin = (root.handlers[:], root.level), sys.stdin
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    sys.argv, sys.stdin, saved_threads = argv, io.StringIO(input or ""), torch.get_num_threads()
    os.environ.update(env)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", saved_threads)))
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            root.handlers = [log]
            root.setLevel(logging.INFO)
            try:
                status = main() or 0
            except SystemExit as exit:
                status = exit_status(exit.code)
            except Exception as error:  # as the interpreter ends a process: sys.excepthook prints it, status 1
                sys.excepthook(type(error), error, error.__traceback__)  # a BadInput as one line (checks.py)
                status = 1
    finally:
        forget_the_run()
        sys.argv, sys.stdin = saved_argv, saved_stdin
        torch.set_num_threads(saved_threads)
        os.environ.clear()
        os.environ.update(saved_env)
        root.handlers = saved_log[0]
        root.setLevel(saved_log[1])
        for number, handler in saved_signals.items():
            signal.signal(number, handler)
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def forget_the_run() -> None:
    """What a new process would not inherit from a run that ended: what its exit does (atexit: fairseq's
    tensorboard writers closed, and forgotten, since fairseq keys them by subset alone; batch prefetching
    stopped) and fairseq's best validation loss so far (on ``save_checkpoint.best``)."""
    progress_bar._close_writers()
    progress_bar._tensorboard_writers.clear()
    vars(checkpoint_utils.save_checkpoint).pop("best", None)
    batch_prefetch.stop_running_consumers()


def recorded_command(line: str) -> tuple:
    """(argv, log) of a commands.sh line: ``mkdir -p DIR && ARGV > LOG 2>&1`` (``>>``), or ARGV (log None)."""
    words = shlex.split(line)
    if words[:2] != ["mkdir", "-p"]:
        return words, None
    assert words[3] == "&&" and words[-3] in (">", ">>") and words[-1] == "2>&1", line
    return words[4:-3], words[-2]


def recorded_commands(commands_sh) -> list:
    """The argv of each command a commands.sh records (its thread settings, comments and log redirections left out)."""
    lines = Path(commands_sh).read_text().splitlines()
    return [recorded_command(line)[0] for line in lines if line and not line.startswith("#") and not is_setting(line)]


def built_once(tmp_path_factory, name: str, build):
    """What ``build(out)`` returns, ``out`` a new directory NAME, built once in the whole test session: the
    first pytest-xdist process to ask builds it, the others wait and read it back (pytest-xdist's recipe
    for session fixtures). What it builds is read only."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory, above each process's own
    out, value = root / name, root / f"{name}.pickle"
    with FileLock(root / f"{name}.lock"):
        if value.exists():
            return pickle.loads(value.read_bytes())
        if out.exists():
            raise RuntimeError(f"{out}: the test process that built it failed (its error is reported)")
        built = build(out)
        value.write_bytes(pickle.dumps(built))
        return built


@pytest.fixture(scope="session")
def tiny_lm_corpus(tmp_path_factory):
    """CorpusPaths of a ~200k-character corpus, one paragraph a line, 1000-piece vocabulary."""
    return built_once(tmp_path_factory, "tiny_lm",
                      lambda out: build_corpus(out, fmt="lm", vocab_size=TINY_VOCAB_SIZE, max_chars=TINY_MAX_CHARS))


@pytest.fixture(scope="session")
def tiny_bert_corpus(tmp_path_factory):
    """Same text in BERT's format: one sentence a line, an empty line between documents."""
    return built_once(tmp_path_factory, "tiny_bert",
                      lambda out: build_corpus(out, fmt="bert", vocab_size=TINY_VOCAB_SIZE, max_chars=TINY_MAX_CHARS))


SYSTEM_LOCALE_DIR = Path("/usr/share/locale")
# Real catalogues of this machine, small ones (the builder splits them by catalogue: 13 train, 1 valid, 2 test)
TINY_CATALOGUES = ["pg_test_timing-15", "xdg-user-dirs", "pg_archivecleanup-15", "pg_config-15", "polkit-1",
                   "libidn2", "man-db-gnulib", "wget-gnulib", "pg_checksums-15", "gprof", "sed", "psmisc",
                   "pg_test_fsync-15", "Linux-PAM", "gettext-runtime", "grep"]  # fmt: skip


def link_catalogues(locale_dir: Path, lang: str, domains) -> Path:
    """A locale directory holding links to the system's ``lang`` catalogues of ``domains``."""
    messages = locale_dir / lang / "LC_MESSAGES"
    messages.mkdir(parents=True)
    for domain in domains:
        (messages / f"{domain}.mo").symlink_to(SYSTEM_LOCALE_DIR / lang / "LC_MESSAGES" / f"{domain}.mo")
    return locale_dir


@pytest.fixture(scope="session")
def tiny_locale_dir(tmp_path_factory):
    """A locale directory with 16 of this machine's real German catalogues (skips without them)."""
    missing = [d for d in TINY_CATALOGUES if not (SYSTEM_LOCALE_DIR / "de" / "LC_MESSAGES" / f"{d}.mo").exists()]
    if missing:
        pytest.skip(f"this machine lacks the German gettext catalogues {', '.join(missing)} "
                    f"under {SYSTEM_LOCALE_DIR}/de/LC_MESSAGES")  # fmt: skip
    return link_catalogues(tmp_path_factory.mktemp("locale"), "de", TINY_CATALOGUES)


@pytest.fixture(scope="session")
def tiny_translation_corpus(tiny_locale_dir, tmp_path_factory):
    """CorpusPaths of an en-de corpus built from ``tiny_locale_dir``, 500-piece joint vocabulary."""
    return built_once(tmp_path_factory, "tiny_en_de",
                      lambda out: build_translation_corpus(out, source_lang="en", target_lang="de",
                                                           locale_dir=tiny_locale_dir, vocab_size=500))  # fmt: skip


def valid_stats(stdout: str) -> dict:
    line = VALID_LINE.findall(stdout)[-1]
    return dict(re.findall(r"\| (\w+) ([-\d.]+)", line))


def pretrain(data_bin, save_dir, arch, flags, updates=3):
    return run_cli(["fairseq-train", data_bin, "--user-dir", USER_DIR, "--task", "mlm_nsp", "--criterion", "mlm_nsp",
                    "--arch", arch, *TINY, "--tokens-per-sample", "64", *TRAIN, "--max-update", updates,
                    "--save-dir", save_dir, "--no-epoch-checkpoints", *flags]).stdout  # fmt: skip


@pytest.fixture(scope="session")
def swap_run(tiny_bert_corpus, tmp_path_factory):
    """A Post-LN BERT (exportable to transformers) pre-trained with swap negatives and span masking;
    also the pre-trained checkpoint of the fine-tuning tests (tests/cli/test_finetune_e2e.py)."""
    def run(save_dir):
        stdout = pretrain(tiny_bert_corpus.data_bin, save_dir, "postln_bert_base", ["--nsp-negatives", "swap", "--span-masking"])
        return save_dir / "checkpoint_last.pt", stdout

    return built_once(tmp_path_factory, "swap_run", run)

"""The run-directory convention of the recipes, the demo and the LR-stability runner (docs/recipes.md);
recipes/_run_dir.sh is its shell side:

- ``RUN_DIR/done``: written once a run's command succeeded; a run that has it is reused, never redone;
- ``commands.sh``: every command, appended, one shell-quoted line each, after the thread settings it runs
  with (``export OMP_NUM_THREADS=1``, ``unset MKL_NUM_THREADS``) whenever they differ from the last recorded;
  a command whose output goes to a log as ``mkdir -p DIR && COMMAND > LOG 2>&1`` (``>>`` when appended), so
  the file runs as written in a plain shell;
- ``DRY_RUN=1``: commands are logged and printed, not run;
- ``SEEDS=N``: a run's seed 1 in ``RUN_DIR``, seed k > 1 in ``RUN_DIR/seed<k>``.
"""
import os
import re
import shlex
from pathlib import Path
from typing import List

DONE = "done"
COMMANDS = "commands.sh"
# The environment that changes numbers (the thread count changes the order of float sums); as recipes/_run_dir.sh
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def dry_run() -> bool:
    return os.environ.get("DRY_RUN") == "1"


def is_done(run_dir) -> bool:
    return (Path(run_dir) / DONE).exists()


def mark_done(run_dir):
    (Path(run_dir) / DONE).touch()


def grid_dir(out, spec: dict, name: str, lr: str) -> Path:
    """A sweep's run of scheme ``name`` at ``lr`` (normformer-sweep): its spec's run_dir, default grid/{name}-lr{lr},
    under the sweep directory ``out``."""
    return Path(out) / spec.get("run_dir", "grid/{name}-lr{lr}").format(name=name, lr=lr)


def seed_dir(run_dir, seed: int) -> Path:
    """Where seed ``seed`` of a run goes: ``run_dir`` for seed 1, ``run_dir/seed<k>`` after (recipes/_run_dir.sh's
    seed_dir)."""
    return Path(run_dir) if seed == 1 else Path(run_dir) / f"seed{seed}"


def seed_paths(path, seeds: int, is_run_dir: bool) -> List[Path]:
    """``path`` for each of ``seeds`` seeds: a run directory's seed directories, or a file of a run directory (its
    train.log, grad_norms.jsonl, ...) as the same file in each."""
    path = Path(path)
    if is_run_dir:
        return [seed_dir(path, k) for k in range(1, seeds + 1)]
    return [seed_dir(path.parent, k) / path.name for k in range(1, seeds + 1)]


def seed_dirs(run_dir) -> List[Path]:
    """The directories of a run's seeds, in seed order: ``run_dir`` (seed 1), then ``run_dir/seed<k>``."""
    run_dir = Path(run_dir)
    seeds = [d for d in run_dir.glob("seed*") if re.fullmatch(r"seed\d+", d.name) and d.is_dir()]
    return [run_dir, *sorted(seeds, key=lambda d: int(d.name[4:]))]


def thread_settings(env) -> List[str]:
    """The shell lines that give a plain shell ``env``'s THREAD_VARIABLES: ``export NAME=VALUE`` or ``unset NAME``."""
    return [f"export {name}={shlex.quote(env[name])}" if name in env else f"unset {name}" for name in THREAD_VARIABLES]


def is_setting(line: str) -> bool:
    return line.startswith(("export ", "unset "))


def command_line(cmd: list, log=None, append: bool = False) -> str:
    """``cmd`` shell-quoted on one line; with ``log``, as the shell line that writes (or appends) its output there."""
    line = shlex.join(map(str, cmd))
    if log is None:
        return line
    log = Path(log)
    return f"mkdir -p {shlex.quote(str(log.parent))} && {line} {'>>' if append else '>'} {shlex.quote(str(log))} 2>&1"


def log_command(log_dir, cmd: list, env=None, log=None, append: bool = False) -> str:
    """Append ``cmd`` to ``log_dir/commands.sh`` (with ``log``: as the line that writes its output there,
    command_line), after the thread settings of the environment it runs with (``env``, by default this
    process's) when they differ from the last recorded; returns the line."""
    line = command_line(cmd, log, append)
    path = Path(log_dir) / COMMANDS
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = thread_settings(os.environ if env is None else env)
    recorded = [r for r in path.read_text(encoding="utf-8").splitlines() if is_setting(r)] if path.exists() else []
    with open(path, "a", encoding="utf-8") as log:
        if recorded[-len(settings) :] != settings:
            log.write("\n".join(settings) + "\n")
        log.write(line + "\n")
    return line

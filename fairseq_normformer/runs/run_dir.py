"""The run-directory convention of the recipes, the demo and the LR-stability runner (docs/recipes.md);
recipes/_run_dir.sh is its shell side:

- ``RUN_DIR/done``: written once a run's command succeeded; a run that has it is reused, never redone;
- ``commands.sh``: every command, appended, one shell-quoted line each;
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


def dry_run() -> bool:
    return os.environ.get("DRY_RUN") == "1"


def is_done(run_dir) -> bool:
    return (Path(run_dir) / DONE).exists()


def mark_done(run_dir):
    (Path(run_dir) / DONE).touch()


def seed_dirs(run_dir) -> List[Path]:
    """The directories of a run's seeds, in seed order: ``run_dir`` (seed 1), then ``run_dir/seed<k>``."""
    run_dir = Path(run_dir)
    seeds = [d for d in run_dir.glob("seed*") if re.fullmatch(r"seed\d+", d.name) and d.is_dir()]
    return [run_dir, *sorted(seeds, key=lambda d: int(d.name[4:]))]


def log_command(log_dir, cmd: list) -> str:
    """Append ``cmd`` to ``log_dir/commands.sh``; returns its shell-quoted line."""
    line = shlex.join(map(str, cmd))
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(log_dir) / COMMANDS, "a", encoding="utf-8") as log:
        log.write(line + "\n")
    return line

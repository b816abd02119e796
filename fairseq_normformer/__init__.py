"""NormFormer for fairseq. Importing this package registers its models, tasks and criterions,
so ``fairseq-train --user-dir <path of this package>`` makes them available, and then applies the
fixes listed in fixes/__init__.py (docs/fixes.md): ``register()``.

In the processes of the two run launchers, which need neither fairseq nor torch (``normformer-sweep`` and
``normformer-paper-settings``: every recipe's dry run calls them), and of ``normformer-user-dir`` (in shell
commands: ``--user-dir "$(normformer-user-dir)"``), the import does neither and the process ends in a fraction of a
second; code those launchers run that needs fairseq calls ``register()``."""
import sys
from pathlib import Path

__version__ = "0.1.0"

LAUNCHERS = {"fairseq_normformer.cli.sweep": "normformer-sweep", "fairseq_normformer.paper": "normformer-paper-settings",
             "fairseq_normformer.cli.user_dir": "normformer-user-dir"}


def register() -> None:
    """Register the models, tasks, criterions and the scheduler (inverse_sqrt_any_warmup) with fairseq and
    apply the fixes; a second call changes nothing."""
    from . import criterions, fixes, models, schedulers, tasks  # noqa: F401

    fixes.apply()


def in_a_launcher() -> bool:
    """Whether this process runs a launcher: ``python -m`` one of LAUNCHERS (the module is not yet in sys.argv
    while its package imports), or its console script."""
    argv = sys.orig_argv[1:]
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
    return module in LAUNCHERS or Path(sys.argv[0]).name in LAUNCHERS.values()


if not in_a_launcher():
    register()

"""NormFormer for fairseq. ``fairseq-train --user-dir <path of this package>`` registers its models, tasks,
criterions and scheduler with fairseq and applies the fixes listed in fixes/__init__.py (docs/fixes.md):
fairseq imports the package after itself, and ``register()`` runs then.

Imported before fairseq, the package imports neither fairseq nor torch: the run launchers that need
neither (``normformer-sweep``, ``normformer-paper-settings``, which every recipe's dry run calls) start in
a fraction of a second. Code that imports the package first and then uses fairseq's registries, or runs a
fairseq CLI in its process, calls ``register()`` first; each of our console scripts does."""
import sys

__version__ = "0.1.0"


def register() -> None:
    """Register the models, tasks, criterions and the scheduler (inverse_sqrt_any_warmup) with fairseq and
    apply the fixes; a second call changes nothing."""
    from . import criterions, fixes, models, schedulers, tasks  # noqa: F401

    fixes.apply()


if "fairseq" in sys.modules:  # imported by fairseq's --user-dir (common.user_dir), or after fairseq
    register()

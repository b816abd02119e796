"""NormFormer for fairseq. Importing this package registers its models, tasks and criterions,
so ``fairseq-train --user-dir <path of this package>`` makes them available, and then applies the
fixes to fairseq listed in fixes/__init__.py (docs/fixes.md)."""
from . import models  # noqa: F401
from . import criterions, tasks  # noqa: F401  (mlm_nsp, *_analysis)
from . import fixes, schedulers  # noqa: F401  (schedulers: inverse_sqrt_any_warmup)

fixes.apply()

__version__ = "0.1.0"

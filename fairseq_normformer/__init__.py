"""NormFormer for fairseq. Importing this package registers its models, tasks and criterions,
so ``fairseq-train --user-dir <path of this package>`` makes them available."""
from . import models  # noqa: F401
from . import criterions, tasks  # noqa: F401  (mlm_nsp, *_analysis)
from . import patches  # noqa: F401  (fairseq on CPU, safe checkpoints; see docs/distributed.md)

__version__ = "0.1.0"

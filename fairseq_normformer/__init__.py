"""NormFormer for fairseq. Importing this package registers its models, tasks and criterions,
so ``fairseq-train --user-dir <path of this package>`` makes them available."""
from . import models  # noqa: F401

__version__ = "0.1.0"

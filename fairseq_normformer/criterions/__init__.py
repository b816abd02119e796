from . import mlm_nsp  # noqa: F401

from . import analysis, mlm_nsp  # noqa: F401

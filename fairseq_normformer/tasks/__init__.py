from . import analysis, lambert_mlm_nsp, mlm_nsp  # noqa: F401

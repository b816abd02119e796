from . import analysis, extractive_qa, mlm_nsp  # noqa: F401

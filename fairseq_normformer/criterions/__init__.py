from . import extractive_qa, mlm_nsp  # noqa: F401

from . import extractive_qa, mlm_nsp, token_classification  # noqa: F401

from . import extractive_qa, mlm_nsp, token_classification, zloss  # noqa: F401

from . import analysis, extractive_qa, lambert_mlm_nsp, mlm_nsp, token_classification  # noqa: F401

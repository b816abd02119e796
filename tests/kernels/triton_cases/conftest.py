"""The Triton kernel tests. They run on CUDA, or on CPU in Triton's interpreter, which has to be
switched on (TRITON_INTERPRET=1) before the kernels are decorated, i.e. before
fairseq_normformer.kernels.triton_layer_norm is imported. So that the variable never leaks into the
rest of the test session, tests/kernels/test_triton_kernels.py runs this directory in its own pytest
process with the variable set; a session without it and without CUDA does not collect it."""
import os

import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

if not (INTERPRETED or torch.cuda.is_available()):
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture
def device():
    return "cpu" if INTERPRETED else "cuda"

"""FC1, the activation and NormFormer's FFN norm as one compiled op (``--ffn-norm-impl compile``).

The paper's conclusion: "the small computational increase ... could be alleviated by fusing the FFN LN with
the preceding fully connected layer, with or without the mean centering and bias". The op is

    y = N(act(x W1ᵀ + b1)),   N the FFN norm of its kind (--ffn-norm-type): LayerNorm, LayerNorm without
                              bias, or RMSNorm (no mean centering, no bias)

written as plain torch functions (``fc1_activation_norm``; run eagerly it *is* the unfused path) and
handed to ``torch.compile`` (inductor: C++ on CPU, Triton on a GPU), which turns forward and backward
into FC1's matrix multiply plus one generated kernel for the activation and the norm, and chooses what
to keep for backward and what to recompute. One compiled function serves every layer with the same
activation and norm kind (the parameters are its arguments), so a model compiles it once per shape.
"""
import functools
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from fairseq import utils
from torch import Tensor, nn

from ..hf.norm_kinds import NORM_KINDS

FFN_NORM_IMPLS = ["eager", "compile"]
COMPILABLE_KINDS = [kind.name for kind in NORM_KINDS.values() if kind.functional]  # LayerConfig refuses the others


def fc1_activation_norm(x: Tensor, fc1_weight: Tensor, fc1_bias: Optional[Tensor], norm_weight: Tensor,
                        norm_bias: Optional[Tensor], eps: float, activation: Callable, kind: str) -> Tensor:
    """N(act(x W1ᵀ + b1)) over the last dimension, N the functional form of ``kind``'s row (hf/norm_kinds.py);
    ``norm_bias`` None for layernorm_nobias and rmsnorm."""
    return NORM_KINDS[kind].functional(activation(F.linear(x, fc1_weight, fc1_bias)), norm_weight, norm_bias, eps)


@functools.lru_cache(maxsize=None)
def compiled_fc1_activation_norm(activation: str, kind: str, backend: str) -> Callable:
    """``fc1_activation_norm`` for one activation and norm kind, through ``torch.compile(backend=backend)``."""
    fn = functools.partial(fc1_activation_norm, activation=utils.get_activation_fn(activation), kind=kind)
    return torch.compile(fn, backend=backend)


class CompiledFC1ActivationNorm(nn.Module):
    """``m(x, fc1, norm)`` = norm(act(fc1(x))) as one compiled op reading ``fc1``'s and ``norm``'s parameters
    at call time, so a layer keeps its ``fc1.*`` and ``ffn_layernorm.*`` names. ``backend``: torch.compile's
    (inductor fuses; the tests use aot_eager, which compiles in a fraction of a second and fuses nothing)."""

    def __init__(self, activation: str, kind: str, backend: str = "inductor"):
        super().__init__()
        self.activation, self.kind, self.backend = activation, kind, backend

    def forward(self, x: Tensor, fc1: nn.Linear, norm: nn.Module) -> Tensor:
        fn = compiled_fc1_activation_norm(self.activation, self.kind, self.backend)
        return fn(x, fc1.weight, fc1.bias, norm.weight, getattr(norm, "bias", None), norm.eps)

    def extra_repr(self) -> str:
        return f"activation={self.activation}, kind={self.kind}, backend={self.backend}"

"""The kinds of norm (--norm-type, --ffn-norm-type), one row each: its paper, equation, parameter count,
options and constructor. Standalone (torch only): the fairseq models (modules/layer_norm.py ``Norm``), the
compiled FFN norm (modules/compiled_ffn_norm.py), docs/model.md's table and the shipped HuggingFace modeling
code (copied into every export directory) all read these rows. Adding a kind: one row and its module."""
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025, "Transformers without Normalization"): DyT(x) = tanh(α x) · γ + β,
    α one learned scalar per norm (init 0.5), γ and β per feature as LayerNorm's weight and bias."""

    def __init__(self, dim: int, alpha_init: float = 0.5):
        super().__init__()
        self.alpha_init = alpha_init
        self.alpha = nn.Parameter(torch.empty(1))
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.alpha * x) * self.weight + self.bias


def layer_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor], eps: float) -> Tensor:
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)  # (x − mean(x)) / sqrt(var(x) + ε) · g + b


def rms_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor], eps: float) -> Tensor:
    return F.rms_norm(x, x.shape[-1:], weight, eps)  # x / sqrt(mean(x²) + ε) · g


@dataclass(frozen=True)
class NormKind:
    name: str  # the value of --norm-type / --ffn-norm-type
    paper: str
    equation: str  # over the n features of one position; g, b: learned per feature
    per_norm: str  # parameters of one norm over n features
    flags: Tuple[str, ...]  # the options that take it
    build: Callable[[int, float], nn.Module]  # (n, ε) -> the norm
    functional: Optional[Callable] = None  # (x, g, b or None, ε) -> the norm of x: --ffn-norm-impl compile fuses it
    layernorm_impl: bool = False  # --layernorm-impl picks its implementation (torch, apex, triton)


# --norm-type sets every norm of the model (the layers', the embedding and final norms, RoBERTa's LM head's);
# --ffn-norm-type NormFormer's FFN LN alone.
NORM_KINDS = {
    kind.name: kind
    for kind in (
        NormKind("layernorm", "Ba et al. 2016", "(x − mean(x)) / sqrt(var(x) + ε) · g + b", "2n",
                 ("--norm-type", "--ffn-norm-type"), lambda n, eps: nn.LayerNorm(n, eps=eps), layer_norm,
                 layernorm_impl=True),
        NormKind("layernorm_nobias", "NormFormer's conclusion: LayerNorm without the bias",
                 "(x − mean(x)) / sqrt(var(x) + ε) · g", "n", ("--ffn-norm-type",),
                 lambda n, eps: nn.LayerNorm(n, eps=eps, bias=False), layer_norm),
        NormKind("rmsnorm", "Zhang & Sennrich 2019", "x / sqrt(mean(x²) + ε) · g (no mean centering, no bias)", "n",
                 ("--norm-type", "--ffn-norm-type"), lambda n, eps: nn.RMSNorm(n, eps=eps), rms_norm),
        NormKind("dyt", "Zhu et al. 2025, DyT", "tanh(α x) · g + b, α one learned scalar per norm (init 0.5)",
                 "2n+1", ("--norm-type",), lambda n, eps: DyT(n)),
        NormKind("none", "ReZero (Bachlechner et al. 2021): no norm; `--rezero` sets the sublayers', the stack's "
                 "and the LM head's", "x", "0", (), lambda n, eps: nn.Identity()),
    )
}  # fmt: skip
NORM_MODULES = tuple({type(kind.build(1, 1e-5)) for kind in NORM_KINDS.values()} - {nn.Identity})  # for _init_weights


def build_norm(kind: str, dim: int, eps: float = 1e-5) -> nn.Module:
    """A norm of ``kind`` over the last dimension of size ``dim``."""
    if kind not in NORM_KINDS:
        raise ValueError(f"unknown norm kind {kind!r}; the kinds: {', '.join(NORM_KINDS)}")
    return NORM_KINDS[kind].build(dim, eps)

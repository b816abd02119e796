"""LayerNorm factory: one place that decides which LayerNorm implementation a model uses.

``--layernorm-impl`` picks it:
  torch   torch.nn.LayerNorm (everywhere)
  apex    NVIDIA apex's FusedLayerNorm (only when apex is importable; never a hard dependency)
  auto    the fastest available one for the device the model will run on
All implementations keep LayerNorm statistics in fp32.
"""
import logging

import torch
from torch import nn

logger = logging.getLogger(__name__)

LAYERNORM_IMPLS = ["auto", "torch", "apex"]


def _apex_layer_norm_cls():
    try:
        from apex.normalization import FusedLayerNorm
    except ImportError:
        return None
    return FusedLayerNorm


def resolve_layernorm_impl(impl: str) -> str:
    """Turn ``auto`` into a concrete implementation and validate the others."""
    if impl not in LAYERNORM_IMPLS:
        raise ValueError(
            f"--layernorm-impl={impl!r} is not one of {', '.join(LAYERNORM_IMPLS)}"
        )
    if impl == "apex" and _apex_layer_norm_cls() is None:
        raise ValueError(
            "--layernorm-impl=apex needs NVIDIA apex (built from source, see docs/kernels.md); "
            "note that the PyPI package named 'apex' is an unrelated project"
        )
    if impl == "auto":
        impl = "apex" if torch.cuda.is_available() and _apex_layer_norm_cls() else "torch"
    return impl


def LayerNorm(dim: int, impl: str = "torch", eps: float = 1e-5) -> nn.Module:
    """A LayerNorm over the last dimension of size ``dim``; ``impl`` as resolve_layernorm_impl returns."""
    if impl == "apex":
        return _apex_layer_norm_cls()(dim, eps=eps)
    return nn.LayerNorm(dim, eps=eps)

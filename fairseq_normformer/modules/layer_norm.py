"""LayerNorm factory: one place that decides which LayerNorm implementation a model uses.

``--layernorm-impl`` picks it:
  torch   torch.nn.LayerNorm (everywhere)
  apex    NVIDIA apex's FusedLayerNorm (only when apex is importable; never a hard dependency)
  triton  this package's Triton kernels (CUDA; fairseq_normformer/kernels), which also fuse the FFN
          activation into NormFormer's FFN LN
  auto    triton on a CUDA machine where triton is importable, else apex there, else torch
All implementations keep LayerNorm statistics in fp32. See docs/kernels.md.
"""
import logging
import os
from typing import Optional

import torch
from torch import nn

logger = logging.getLogger(__name__)

LAYERNORM_IMPLS = ["auto", "torch", "apex", "triton"]
_logged_choices = set()


def _apex_layer_norm_cls():
    try:
        from apex.normalization import FusedLayerNorm
    except ImportError:
        return None
    return FusedLayerNorm


def _triton_kernels():
    """The kernels module, or None where triton is not importable (imported only when asked for)."""
    try:
        from ..kernels import triton_layer_norm
    except ImportError:
        return None
    return triton_layer_norm


def _triton_runnable() -> bool:
    """Triton kernels run on CUDA, or on CPU in Triton's interpreter (TRITON_INTERPRET=1, for tests)."""
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


def resolve_layernorm_impl(impl: str) -> str:
    """Turn ``auto`` into a concrete implementation, validate the others, and log the choice once."""
    if impl not in LAYERNORM_IMPLS:
        raise ValueError(f"--layernorm-impl={impl!r} is not one of {', '.join(LAYERNORM_IMPLS)}")
    if impl == "apex" and _apex_layer_norm_cls() is None:
        raise ValueError(
            "--layernorm-impl=apex needs NVIDIA apex (built from source, see docs/kernels.md); "
            "note that the PyPI package named 'apex' is an unrelated project"
        )
    if impl == "triton" and not _triton_runnable():
        raise ValueError("--layernorm-impl=triton needs a CUDA GPU; use --layernorm-impl=torch or auto here")
    if impl == "triton" and _triton_kernels() is None:
        raise ValueError("--layernorm-impl=triton needs the triton package (pip install triton)")
    resolved = _auto_impl() if impl == "auto" else impl
    if (impl, resolved) not in _logged_choices:
        _logged_choices.add((impl, resolved))
        logger.info(f"LayerNorm implementation: {resolved} (--layernorm-impl={impl})")
    return resolved


def _auto_impl() -> str:
    if not torch.cuda.is_available():
        return "torch"
    if _triton_kernels() is not None:
        return "triton"
    return "apex" if _apex_layer_norm_cls() is not None else "torch"


def LayerNorm(dim: int, impl: str = "torch", eps: float = 1e-5) -> nn.Module:
    """A LayerNorm over the last dimension of size ``dim``; ``impl`` as resolve_layernorm_impl returns."""
    if impl == "apex":
        return _apex_layer_norm_cls()(dim, eps=eps)
    if impl == "triton":
        return _triton_kernels().TritonLayerNorm(dim, eps=eps)
    return nn.LayerNorm(dim, eps=eps)


def ActivationLayerNorm(activation_fn: str, impl: str) -> Optional[nn.Module]:
    """``m(x, norm)`` = norm(activation_fn(x)) in one kernel, reading the LayerNorm ``norm``'s parameters;
    None where ``impl`` has no such kernel (then the activation and the LayerNorm run as two ops)."""
    if impl != "triton" or activation_fn not in _triton_kernels().ACTIVATIONS:
        return None
    return _triton_kernels().ActivationLayerNorm(activation_fn)

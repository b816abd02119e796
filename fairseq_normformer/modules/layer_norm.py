"""LayerNorm factory: one place that decides which LayerNorm implementation a model uses.

``--layernorm-impl`` picks it:
  torch   torch.nn.LayerNorm (everywhere)
  apex    NVIDIA apex's FusedLayerNorm (only when apex is importable; never a hard dependency)
  triton  this package's Triton kernels (CUDA compute capability >= 8.0; fairseq_normformer/kernels),
          which also fuse the FFN activation into NormFormer's FFN LN
  auto    triton on a GPU of compute capability >= 8.0 where triton is importable, else apex on a
          CUDA machine where apex is importable, else torch
NormFormer's activation -> FFN LN runs as one function (ActivationLayerNorm) with torch and triton.
All implementations keep LayerNorm statistics in fp32. See docs/kernels.md.
"""
import logging
import os
from typing import Optional, Tuple

import torch
from torch import nn

from ..checks import BadInput
from ..hf.norm_kinds import NORM_KINDS, build_norm
from .activation_layer_norm import TorchActivationLayerNorm

logger = logging.getLogger(__name__)

LAYERNORM_IMPLS = ["auto", "torch", "apex", "triton"]
# Triton supports GPUs of compute capability 8.0 (Ampere) and newer only (triton-lang/triton#5066).
TRITON_MIN_CAPABILITY = (8, 0)
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


def _cuda_capability() -> Optional[Tuple[int, int]]:
    """The current GPU's CUDA compute capability, or None on a machine without CUDA."""
    return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None


def _format_capability(capability: Tuple[int, int]) -> str:
    return ".".join(map(str, capability))


def _triton_capability_problem() -> Optional[str]:
    """Why this machine's GPU cannot run Triton, or None where it can (or where there is no GPU)."""
    capability = _cuda_capability()
    if capability is None or capability >= TRITON_MIN_CAPABILITY:
        return None
    return (
        f"CUDA capability {_format_capability(capability)} < {_format_capability(TRITON_MIN_CAPABILITY)}, "
        "Triton unsupported"
    )


def resolve_layernorm_impl(impl: str) -> str:
    """Turn ``auto`` into a concrete implementation, validate the others, and log the choice once."""
    if impl not in LAYERNORM_IMPLS:
        raise ValueError(f"--layernorm-impl={impl!r} is not one of {', '.join(LAYERNORM_IMPLS)}")
    _check_runs_here(impl)
    resolved, why = _auto_impl() if impl == "auto" else (impl, "")
    if (impl, resolved) not in _logged_choices:
        _logged_choices.add((impl, resolved))
        logger.info(f"LayerNorm implementation: {resolved} (--layernorm-impl={impl}{why and ': ' + why})")
    return resolved


def _check_runs_here(impl: str):
    """A one-line error (BadInput) for an explicit apex or triton that this machine cannot run."""
    if impl == "apex" and _apex_layer_norm_cls() is None:
        raise BadInput(
            "--layernorm-impl=apex needs NVIDIA apex (built from source, see docs/kernels.md); "
            "note that the PyPI package named 'apex' is an unrelated project"
        )
    if impl == "triton" and not _triton_runnable():
        raise BadInput("--layernorm-impl=triton needs a CUDA GPU; use --layernorm-impl=torch or auto here")
    capability_problem = _triton_capability_problem() if impl == "triton" else None
    if capability_problem is not None:
        raise BadInput(
            f"--layernorm-impl=triton needs a GPU of CUDA compute capability >= 8.0 (Ampere or newer): "
            f"{capability_problem}; use --layernorm-impl=auto, apex or torch here"
        )
    if impl == "triton" and _triton_kernels() is None:
        raise BadInput("--layernorm-impl=triton needs the triton package (pip install triton)")


def _auto_impl() -> Tuple[str, str]:
    """What ``auto`` picks on this machine, and why."""
    capability = _cuda_capability()
    if capability is None:
        return "torch", "no CUDA GPU"
    why_not_triton = _triton_capability_problem()
    if why_not_triton is None and _triton_kernels() is not None:
        return "triton", f"CUDA capability {_format_capability(capability)}, triton importable"
    why_not_triton = why_not_triton or "triton not importable"
    if _apex_layer_norm_cls() is not None:
        return "apex", f"{why_not_triton}; NVIDIA apex importable"
    return "torch", f"{why_not_triton}; NVIDIA apex not importable"


def LayerNorm(dim: int, impl: str = "torch", eps: float = 1e-5) -> nn.Module:
    """A LayerNorm over the last dimension of size ``dim``; ``impl`` as resolve_layernorm_impl returns."""
    if impl == "apex":
        return _apex_layer_norm_cls()(dim, eps=eps)
    if impl == "triton":
        return _triton_kernels().TritonLayerNorm(dim, eps=eps)
    return nn.LayerNorm(dim, eps=eps)


def Norm(kind: str, dim: int, impl: str = "torch", eps: float = 1e-5) -> nn.Module:
    """A norm of kind ``kind`` (--norm-type, --ffn-norm-type; hf/norm_kinds.py) over the last dimension of size
    ``dim``; ``impl`` (--layernorm-impl) picks the implementation of the kinds it applies to (LayerNorm's)."""
    if kind in NORM_KINDS and NORM_KINDS[kind].layernorm_impl:
        return LayerNorm(dim, impl, eps)
    return build_norm(kind, dim, eps)


def ActivationLayerNorm(activation_fn: str, impl: str) -> Optional[nn.Module]:
    """``m(x, norm)`` = norm(activation_fn(x)) as one function that keeps only x for backward, reading the
    LayerNorm ``norm``'s parameters: the Triton kernel with triton, a torch autograd function with torch
    (any activation); None for apex and for activations the Triton kernel lacks (then two ops run)."""
    if impl == "torch":
        return TorchActivationLayerNorm(activation_fn)
    if impl != "triton" or activation_fn not in _triton_kernels().ACTIVATIONS:
        return None
    return _triton_kernels().ActivationLayerNorm(activation_fn)

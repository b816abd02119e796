"""Find the first operation whose activations overflow (the LR stability test, Table 3).

``ActivationMonitor`` puts forward hooks on a model's modules for one training forward pass and
records, in execution order, the largest |activation| of each: every Linear, LayerNorm and
Embedding, each attention block's output (named ``self_attn.out_proj``: W^O with HeadScale), each
layer's output (the residual stream), and the attention logits q·k/sqrt(d_head), computed from the
q and k SDPA receives (after QK-norm; SDPA never materialises the logits). The first record above ``threshold``
(65504, the fp16 maximum, emulates fp16 in an fp32 run) or not finite is the culprit.
Opt-in only: nothing is hooked in normal training.
"""
import re
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

import torch
from torch import Tensor, nn

from ..modules.attention import SelfAttention
from .param_groups import strip_wrappers

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.(.+))?$")
_SKIPPED = (nn.Identity, nn.Dropout, nn.ModuleList, nn.ModuleDict, nn.Sequential)
_QK_CHUNK_ELEMENTS = 1 << 24  # logits computed per chunk of heads to bound memory


@dataclass
class Overflow:
    name: str  # module name, e.g. "decoder.layers.0.self_attn.qk_logits"
    layer: Optional[int]  # None outside the transformer layers
    operation: str  # e.g. "self_attn.qk_logits", "fc2", "layer output"
    max_abs: float

    def describe(self) -> str:
        where = f"layer {self.layer} {self.operation}" if self.layer is not None else self.name
        return f"{where} (max |activation| {self.max_abs:.4g})"


def locate(name: str) -> Tuple[Optional[int], str]:
    """(layer, operation) of a module name; the layer module itself is the 'layer output'."""
    match = _LAYER.search(name)
    if match is None:
        return None, name
    return int(match.group(1)), match.group(2) or "layer output"


def first_tensor(output) -> Optional[Tensor]:
    if torch.is_tensor(output):
        return output
    if isinstance(output, (tuple, list)):
        return next((t for t in output if torch.is_tensor(t)), None)
    return None


def _is_watched(module: nn.Module) -> bool:
    return not isinstance(module, _SKIPPED) and "Dropout" not in type(module).__name__


def attention_logits(q: Tensor, k: Tensor) -> Iterator[Tuple[slice, Tensor]]:
    """q·kᵀ / sqrt(d_head) of every head and (query, key) pair, in chunks of batch rows to bound memory.
    q: (B, H, T, Dh), k: (B, H, S, Dh), as SDPA receives them -> (rows, (b, H, T, S) fp32 logits) per chunk."""
    bsz, heads, tgt_len, head_dim = q.shape
    rows = max(1, _QK_CHUNK_ELEMENTS // (heads * tgt_len * k.size(2)))
    q, k = q.detach().float() * head_dim**-0.5, k.detach().float()
    for i in range(0, bsz, rows):
        yield slice(i, i + rows), q[i : i + rows] @ k[i : i + rows].transpose(-1, -2)


def max_abs_attention_logits(q: Tensor, k: Tensor) -> Tensor:
    """max |q·k| / sqrt(d_head) over all heads and (query, key) pairs, masked ones included (as an
    fp16 q·kᵀ would compute them before masking). q, k: (B, H, T, Dh) -> a 0-d fp32 tensor."""
    return torch.stack([logits.abs().amax() for _, logits in attention_logits(q, k)]).amax()


class ActivationMonitor:
    """``with ActivationMonitor(model, threshold) as monitor: <forward>``; then ``monitor.first_overflow()``."""

    def __init__(self, model: nn.Module, threshold: float = FP16_MAX):
        if not threshold > 0:
            raise ValueError(f"the overflow threshold must be positive, got {threshold}")
        self.model, self.threshold = model, threshold
        self.names: List[str] = []
        self.maxima: List[Tensor] = []
        self._handles = []

    def __enter__(self):
        for name, module in self.model.named_modules():
            name = strip_wrappers(name)
            if isinstance(module, SelfAttention):
                self._hook_attention_logits(name, module)
                name += ".out_proj"  # its output is W^O's (with HeadScale's γ folded in, Eq. 3)
            if name and _is_watched(module):
                self._handles.append(module.register_forward_hook(self._record_hook(name)))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _record(self, name: str, value: Tensor):
        self.names.append(name)
        self.maxima.append(value.detach().float().reshape(()))

    def _record_hook(self, name: str):
        def hook(module, inputs, output):
            tensor = first_tensor(output)
            if tensor is not None and tensor.is_floating_point() and tensor.numel() > 0:
                self._record(name, tensor.detach().abs().amax())

        return hook

    def _hook_attention_logits(self, name: str, attention: nn.Module):
        """Hooks the attention's probe points, whose outputs are the q and k SDPA receives."""
        queries = {}

        def keep_q(module, inputs, q):
            queries["q"] = q

        def logits(module, inputs, k):
            q = queries.pop("q", None)
            if q is not None:
                self._record(f"{name}.qk_logits", max_abs_attention_logits(q, k))

        self._handles.append(attention.query_probe.register_forward_hook(keep_q))
        self._handles.append(attention.key_probe.register_forward_hook(logits))

    def first_overflow(self) -> Optional[Overflow]:
        """The first recorded activation above the threshold or not finite (one device sync)."""
        if not self.maxima:
            return None
        maxima = torch.stack([m.to(self.maxima[0].device) for m in self.maxima])
        bad = ~(maxima <= self.threshold)  # NaN compares False
        if not bad.any():
            return None
        index = int(bad.nonzero()[0])
        layer, operation = locate(self.names[index])
        return Overflow(self.names[index], layer, operation, float(maxima[index]))

"""Scale diagnostics, recorded during ``fairseq-train`` on the training batch of every N-th update: the signs of
the instabilities that small models show at high LR and large models at any (Wortsman et al. 2023, "Small-scale
proxies for large-scale Transformer training instabilities"), and the "curse of depth" (Sun et al. 2025).

  attn_logit/layers.i   max over heads h and the (query i, key j) pairs the softmax uses of q_i·k_j / sqrt(d_head),
                        q and k as SDPA receives them (after QKV LN and QK-norm): attention-logit growth.
  abs_log_z             mean over the predicted tokens of |log Z|, Z = Σ_v exp(z_v) of the output logits z:
                        output-logit divergence (what z-loss penalises).
  layer_rms/layers.i    sqrt(mean over the non-padding tokens t and features c of x_tc²), x the residual stream
                        after layer i.

Forward hooks during the ``train_step`` calls of a recorded update (every micro-batch of it; activation
checkpointing's recomputation overwrites a forward's values, it does not add to them), then logged through
fairseq's metrics and appended to a JSON Lines file, as the gradient norms (grad_norms.py)::

    {"update": 10, "lr": 0.0006, "attn_logit": {"layers.0": 3.2, ...}, "layer_rms": {"layers.0": 1.1, ...},
     "abs_log_z": 4.6}

A model with two stacks (the encoder-decoder) names its layers ``encoder.layers.i`` and ``decoder.layers.i``.
Data-parallel runs measure the first rank's share of each batch. LaMBERT's two-phase attention is not measured.
"""
import inspect
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Optional

import torch
from fairseq.logging import metrics
from torch import Tensor, nn

from ..modules.attention import SelfAttention
from ..modules.lambert_layer import LambertLayer
from ..modules.normformer_layer import NormFormerLayer
from .activations import attention_logits, first_tensor
from .grad_norms import drop_stale_meters, is_first_rank
from .param_groups import strip_wrappers

ATTN_LOGIT, LAYER_RMS, ABS_LOG_Z = "attn_logit", "layer_rms", "abs_log_z"  # record keys and metric names


def allowed_pairs(tgt_len: int, key_padding_mask: Optional[Tensor], causal: bool, device) -> Tensor:
    """The (query i, key j) pairs the softmax uses, (B or 1, 1, T, T): j not padding, i not padding (its output is
    not used), and j <= i when causal. key_padding_mask: (B, T), True at padding."""
    allowed = torch.ones(1, 1, tgt_len, tgt_len, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed.tril()
    if key_padding_mask is not None:
        tokens = ~key_padding_mask.bool()
        allowed = allowed & tokens[:, None, None, :] & tokens[:, None, :, None]
    return allowed


def max_attention_logit(q: Tensor, k: Tensor, allowed: Tensor) -> Tensor:
    """max over heads and allowed pairs of q·k / sqrt(d_head). q: (B, H, T, Dh), k: (B, H, S, Dh); allowed:
    (B or 1, 1, T, S) -> a 0-d fp32 tensor (-inf when no pair is allowed)."""
    maxima = []
    for rows, logits in attention_logits(q, k):
        pairs = allowed[rows] if allowed.size(0) > 1 else allowed
        maxima.append(logits.masked_fill(~pairs, float("-inf")).amax())
    return torch.stack(maxima).amax()


def log_z(logits: Tensor) -> Tensor:
    """(..., V) output logits -> (...,) log Z = log Σ_v exp(z_v), the log of the softmax's normaliser."""
    return torch.logsumexp(logits.detach().float(), dim=-1)


def predicted_logits(logits: Tensor, target: Tensor, padding_idx: int) -> Tensor:
    """The rows of the model's output logits that the loss predicts, (N, V). A causal LM's logits are (B, T, V), one
    per target position, padding left out; the masked LMs' heads return the masked tokens' (M, V) only."""
    if logits.shape[:-1] == target.shape:
        return logits[target.ne(padding_idx)]
    return logits.reshape(-1, logits.size(-1))


def squares_and_count(x: Tensor, key_padding_mask: Optional[Tensor]):
    """Σ x_tc² over the non-padding tokens t and the features c of a (T, B, C) residual stream, and their number."""
    x = x.detach().float()
    if key_padding_mask is not None:
        x = x[~key_padding_mask.bool().t()]  # (N, C)
    return x.pow(2).sum(), x.numel()


def diagnosed_layers(model: nn.Module) -> Dict[str, NormFormerLayer]:
    """{key: layer} of every layer of the model's stacks: ``layers.i``, or ``encoder.layers.i``/``decoder.layers.i``
    with two stacks. Wrappers (DDP, FSDP, activation checkpointing) are looked through."""
    layers = {strip_wrappers(name): m for name, m in model.named_modules() if isinstance(m, NormFormerLayer)}
    stacks = {name.rsplit(".layers.", 1)[0] for name in layers}
    depth = 2 if len(stacks) == 1 else 3
    return {".".join(name.split(".")[-depth:]): layer for name, layer in layers.items()}


def check_diagnosable(model: nn.Module) -> None:
    """A clear refusal of the models the hooks cannot read, before training."""
    layers = diagnosed_layers(model)
    if not layers:
        raise ValueError(f"--diagnostics-interval: {type(model).__name__} has no NormFormer layers to measure")
    if any(isinstance(layer, LambertLayer) for layer in layers.values()):
        raise ValueError("--diagnostics-interval: lambert's two-phase attention is not measured (use normformer_bert)")


class BatchDiagnostics:
    """``with BatchDiagnostics(model, target, padding_idx) as batch: <forward and backward>``; then ``batch.values``:
    {key: 0-d tensor} of one forward, ``attn_logit/<layer>`` a maximum, the others (sum, count) pairs to be pooled
    over micro-batches (``DiagnosticsRecorder``)."""

    def __init__(self, model: nn.Module, target: Tensor, padding_idx: int):
        self.model, self.target, self.padding_idx = model, target, padding_idx
        self.values: Dict[str, object] = {}
        self._handles = []

    def __enter__(self):
        for key, layer in diagnosed_layers(self.model).items():
            self._hook_layer(key, layer)
        self._handles.append(self.model.register_forward_hook(self._output_logits))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _output_logits(self, model, inputs, output):
        z = log_z(predicted_logits(first_tensor(output), self.target, self.padding_idx))
        self.values[ABS_LOG_Z] = (z.abs().sum(), z.numel())

    def _hook_layer(self, key: str, layer: NormFormerLayer):
        """The self-attention's arguments (padding, causal), its q and k, and the layer's output."""
        attention: SelfAttention = layer.self_attn
        seen = {}
        signature = inspect.signature(attention.forward)

        def arguments(module, args, kwargs):
            bound = signature.bind(*args, **kwargs).arguments
            seen["padding"], seen["causal"] = bound.get("key_padding_mask"), bound.get("causal", False)

        def keep_q(module, inputs, q):
            seen["q"] = q

        def logits(module, inputs, k):
            allowed = allowed_pairs(k.size(2), seen["padding"], seen["causal"], k.device)
            self.values[f"{ATTN_LOGIT}/{key}"] = max_attention_logit(seen.pop("q"), k, allowed)

        def output(module, inputs, out):
            self.values[f"{LAYER_RMS}/{key}"] = squares_and_count(first_tensor(out), seen["padding"])

        self._handles += [attention.register_forward_pre_hook(arguments, with_kwargs=True),
                          attention.query_probe.register_forward_hook(keep_q),
                          attention.key_probe.register_forward_hook(logits),
                          layer.register_forward_hook(output)]  # fmt: skip


class DiagnosticsRecorder:
    """Every ``interval`` updates: hooks on the update's training forward passes (``watch``), then the pooled values
    logged through fairseq's metrics (training log and ``--tensorboard-logdir``) and appended to ``path``."""

    def __init__(self, interval: int, path: Optional[str] = None):
        if interval < 1:
            raise ValueError(f"--diagnostics-interval must be at least 1 to record, got {interval}")
        self.interval, self.path = interval, path
        self.update: Optional[int] = None  # the update whose forward passes the pooled values are from
        self.maxima: Dict[str, Tensor] = {}
        self.sums: Dict[str, list] = {}  # key -> [Σ value, count]
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def due(self, update: int) -> bool:
        return update % self.interval == 0 and is_first_rank()

    @contextmanager
    def watch(self, update: int, model: nn.Module, target: Tensor, padding_idx: int):
        """Around one ``train_step`` of update ``update``: its forward's values pooled into the update's."""
        with BatchDiagnostics(model, target, padding_idx) as batch:
            yield batch
        self.add(update, batch.values)

    def add(self, update: int, values: Dict[str, object]) -> None:
        """Pools one forward's values into the update's: maxima by max, the others' sums and counts by sum."""
        if update != self.update:  # an update fairseq skipped (fp16 overflow) never reached ``step``
            self.update, self.maxima, self.sums = update, {}, {}
        for key, value in values.items():
            if key.startswith(ATTN_LOGIT):
                self.maxima[key] = value if key not in self.maxima else torch.maximum(self.maxima[key], value)
            else:
                total = self.sums.setdefault(key, [0.0, 0])
                total[0], total[1] = total[0] + value[0], total[1] + value[1]

    def step(self, optimizer, update: int) -> None:
        """Called once per update, where the gradient norms are: logs and writes what ``watch`` saw of it."""
        for prefix in (ATTN_LOGIT, LAYER_RMS, ABS_LOG_Z):
            drop_stale_meters(prefix)
        if update == self.update:
            self.record(update, optimizer.get_lr())

    def record(self, update: int, lr: float) -> Dict[str, float]:
        values = {key: float(value) for key, value in self.maxima.items()}
        for key, (total, count) in self.sums.items():
            mean = float(total) / max(count, 1)
            values[key] = mean**0.5 if key.startswith(LAYER_RMS) else mean  # RMS: the root of the mean square
        self.update, self.maxima, self.sums = None, {}, {}
        for key, value in values.items():
            metrics.log_scalar(key, value, priority=10000)
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps({"update": update, "lr": lr, **nested(values)}) + "\n")
        return values


def nested(values: Dict[str, float]) -> dict:
    """{"attn_logit/layers.0": v, "abs_log_z": w} -> {"attn_logit": {"layers.0": v}, "abs_log_z": w}."""
    record = {}
    for key, value in sorted(values.items()):
        kind, sep, layer = key.partition("/")
        if sep:
            record.setdefault(kind, {})[layer] = value
        else:
            record[kind] = value
    return record

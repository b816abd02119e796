"""One training step of a model at any size, on the meta device: shapes and dtypes, no memory.

``build_on_meta`` builds a model through fairseq's task (``task.build_model``) under
``torch.device("meta")``, and ``trace_step`` runs the task's own ``train_step``: the model, the real criterion and
fairseq's optimizer's backward. While it runs:

- ``FlopCounterMode`` counts FLOPs: torch's formulas (matrix products and attention), and apart
  LayerNorm's (DeepSpeed's flops profiler: 5 an element forward; backward twice that);
- ``saved_tensors_hooks`` sees every tensor autograd keeps for backward (``SavedBytes``);
- ``cuda_kernels`` calls the kernels torch's CUDA build would (flash attention, fused dropout with a
  bool mask), where the meta device would take the CPU's (math attention, dropout masks in the
  activations' dtype);
- ``DevicePlacement`` stops the step with one line naming the op when a tensor on another device
  (a CPU tensor made inside forward) meets the meta ones, as the first GPU step would.
"""
import contextlib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F
from torch.fx.experimental import _config as fx_config
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from .checks import BadInput

TORCH_ROOT = str(Path(torch.__file__).resolve().parent)
LAYER_NORM_FORWARD_FLOPS = 5  # an element (DeepSpeed's profiler: mean, variance, normalise, scale, shift)


@contextlib.contextmanager
def cuda_kernels():
    """Attention and dropout as torch's CUDA build runs them in fp16: flash attention (memory-efficient
    attention with a mask), which keeps a log-sum-exp instead of the T x T probabilities, and
    ``native_dropout``, whose mask is a bool. Patched in ``torch.nn.functional`` for the step, so the
    layers --checkpoint-activations recomputes in backward use them too (a TorchFunctionMode does not
    reach into backward)."""
    with mock.patch.object(F, "scaled_dot_product_attention", fused_attention), \
            mock.patch.object(F, "dropout", fused_dropout):  # fmt: skip
        yield


def fused_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    if attn_mask is None:
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, scale=scale)[0]
    if attn_mask.dtype == torch.bool:  # True = may attend, as SDPA's CUDA path converts it
        attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill(~attn_mask, -float("inf"))
    bias = attn_mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, True, dropout_p, is_causal, scale=scale
    )[0]


def fused_dropout(x, p=0.5, training=True, inplace=False):
    if not training or p == 0:
        return x
    return torch.native_dropout(x, p, True)[0]


class DevicePlacement(TorchDispatchMode):
    """Stops at the first op that mixes a tensor on another device (0-dim tensors excepted, which
    CUDA accepts too) with meta ones. A data-dependent check (``.item()`` of a meta tensor, fairseq's
    "any padding?") is answered ``scalar``: 0 for a batch without padding, 1 to take the padded paths."""

    def __init__(self, scalar: int = 0):
        super().__init__()
        self.scalar = scalar

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        devices = {t.device.type for t in tensors if t.dim() > 0}
        if "meta" in devices and len(devices) > 1:
            other = sorted(devices - {"meta"})[0]
            raise BadInput(f"{func} mixes a tensor on {other} into the meta-device step (a GPU step fails "
                           f"there too) at {caller()}: create it on the input's device")  # fmt: skip
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            return self.scalar
        return func(*args, **kwargs)


class MetaInitialization(TorchDispatchMode):
    """While a model is built: a meta tensor copied to the CPU stays on meta (fairseq's BERT
    initialisation, ``init_bert_params``, draws its normal values on the CPU and copies them back)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and args[0].device.type == "meta":
            kwargs = {**kwargs, "device": torch.device("meta")}
        return func(*args, **kwargs)


def caller() -> str:
    """file:line of the innermost frame outside torch (the model code that called the op)."""
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(TORCH_ROOT) and frame.filename != __file__:
            return f"{frame.filename}:{frame.lineno}"
    return "?"


@dataclass
class SavedBytes:
    """Bytes of the distinct storages autograd keeps for backward (parameters excluded), by phase:
    the forward pass, and backward (the layers --checkpoint-activations recomputes)."""

    excluded: set
    forward: dict = field(default_factory=dict)
    backward: dict = field(default_factory=dict)
    keep_alive: list = field(default_factory=list)  # storage ids stay unique while their storages live

    def pack(self, t):
        storage = t.untyped_storage()
        if storage._cdata not in self.excluded:
            in_backward = torch._C._current_graph_task_id() != -1
            (self.backward if in_backward else self.forward)[storage._cdata] = storage.nbytes()
            self.keep_alive.append(storage)
        return t

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)


def layer_norm_flops(input_shape, *args, out_shape=None, **kwargs) -> int:
    return LAYER_NORM_FORWARD_FLOPS * input_shape.numel()


def layer_norm_backward_flops(grad_out_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * LAYER_NORM_FORWARD_FLOPS * grad_out_shape.numel()


def layer_norm_ops() -> dict:
    return {torch.ops.aten.native_layer_norm: layer_norm_flops,
            torch.ops.aten.native_layer_norm_backward: layer_norm_backward_flops}  # fmt: skip


@dataclass
class StepTrace:
    parameters: int
    flops: int  # torch's FlopCounterMode formulas
    layer_norm_flops: int
    saved_forward_bytes: int
    saved_backward_bytes: int


def build_on_meta(task, cfg):
    """The model (in fp16, the paper's --memory-efficient-fp16) and criterion of ``cfg``, built by
    ``task`` on the meta device."""
    with torch.device("meta"), MetaInitialization():
        return task.build_model(cfg.model).half(), task.build_criterion(cfg.criterion)


def trace_step(task, cfg, model, criterion, sample: dict, padded: bool = False) -> StepTrace:
    """``task.train_step`` once on ``sample`` (meta tensors) with fairseq's optimizer for its backward.
    ``padded``: fairseq's "any padding?" checks answer yes (else no); boolean indexing (the masked LM
    heads) keeps every position."""
    from fairseq import optim

    params = list(model.parameters())
    optimizer = optim.MemoryEfficientFP16Optimizer.build_optimizer(cfg, params)
    saved = SavedBytes({p.untyped_storage()._cdata for p in params})
    counter = FlopCounterMode(display=False, custom_mapping=layer_norm_ops())
    try:
        with cuda_kernels(), DevicePlacement(int(padded)), counter, saved.hooks(), \
                fx_config.patch(meta_nonzero_assume_all_nonzero=True):  # fmt: skip
            task.train_step(sample, model, criterion, optimizer, update_num=0)
    except RuntimeError as e:  # an op torch checks itself before ours sees it
        if "device" not in str(e):
            raise
        raise BadInput(f"the meta-device step stopped: {str(e).splitlines()[0]}") from e
    norm_flops = sum(n for op, n in counter.get_flop_counts()["Global"].items() if "layer_norm" in str(op))
    return StepTrace(sum(p.numel() for p in params), counter.get_total_flops() - norm_flops, norm_flops,
                     sum(saved.forward.values()), sum(saved.backward.values()))  # fmt: skip


def lm_step(arch: str, batch_size: int, seq_len: int, dropout: float, checkpoint_activations: bool,
            vocab: int, flags=()) -> StepTrace:  # fmt: skip
    """One language-modelling step of ``arch`` (and fairseq-train ``flags``) on ``batch_size`` x ``seq_len``
    tokens, with a dictionary of ``vocab`` symbols built in memory (no data files), as fairseq-train
    with the paper's settings."""
    from fairseq import options
    from fairseq.data import Dictionary
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.tasks.language_modeling import LanguageModelingTask

    args = ["no-data", "--task", "language_modeling", "--arch", arch, "--tokens-per-sample", str(seq_len),
            "--dropout", str(dropout), "--attention-dropout", str(dropout), "--optimizer", "adam",
            "--memory-efficient-fp16", "--fp16-init-scale", "4"]  # fmt: skip
    args += (["--checkpoint-activations"] if checkpoint_activations else []) + list(flags)
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), args))
    dictionary = Dictionary()
    for i in range(vocab - len(dictionary)):
        dictionary.add_symbol(f"w{i}")
    task = LanguageModelingTask(cfg.task, dictionary)
    return trace_step(task, cfg, *build_on_meta(task, cfg), lm_sample(batch_size, seq_len, vocab))


def lm_sample(batch_size: int, seq_len: int, vocab: int) -> dict:
    """A batch as fairseq's language_modeling task collates it, on the meta device (no padding)."""
    tokens = torch.randint(4, vocab, (batch_size, seq_len), device="meta")
    lengths = torch.full((batch_size,), seq_len, device="meta")
    return {"id": torch.arange(batch_size, device="meta"), "nsentences": batch_size, "ntokens": tokens.numel(),
            "net_input": {"src_tokens": tokens, "src_lengths": lengths}, "target": tokens}  # fmt: skip

"""The torch-path activation -> FFN LN function (NormFormer's FFN LN, Fig. 1): the same numbers and
gradients as fairseq's activation followed by torch's LayerNorm, and no (T, B, F) tensor kept for
backward beyond what a Pre-LN layer's FFN keeps (counted exactly with saved_tensors_hooks, and as the
bytes still allocated after the forward in torch.profiler's memory events)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from fairseq import utils
from torch import nn
from torch.profiler import ProfilerActivity, profile

from fairseq_normformer.modules import LayerConfig, NormFormerLayer
from fairseq_normformer.modules.activation_layer_norm import (
    TorchActivationLayerNorm,
    TorchActivationLayerNormFunction,
)

ACTIVATIONS = ["relu", "relu_squared", "gelu", "gelu_accurate", "tanh", "linear"]
WIDTH = 24


def ffn_layernorm(dtype=torch.float32) -> nn.LayerNorm:
    torch.manual_seed(0)
    norm = nn.LayerNorm(WIDTH)
    nn.init.normal_(norm.weight, 1.0, 0.5)
    nn.init.normal_(norm.bias, 0.0, 0.5)
    return norm.to(dtype)


def output_and_grads(fn, x, norm, dy_dtype=torch.float32):
    """fn(x, norm), and the gradients w.r.t. x, weight and bias of a fixed random dy (rounded to dy_dtype)."""
    x = x.detach().requires_grad_()
    norm.zero_grad()
    y = fn(x, norm)
    y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(dy_dtype).to(y.dtype))
    return [y, x.grad, norm.weight.grad, norm.bias.grad]


def unfused(activation: str):
    activation_fn = utils.get_activation_fn(activation)
    return lambda x, norm: norm(activation_fn(x))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_fp32_equals_activation_then_layer_norm(activation):
    x = 2 * torch.randn(7, 3, WIDTH)
    fused = output_and_grads(TorchActivationLayerNorm(activation), x, ffn_layernorm())
    reference = output_and_grads(unfused(activation), x, ffn_layernorm())
    for name, got, want in zip(["output", "dx", "dweight", "dbias"], fused, reference):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_half_precision_matches_fp32_reference_of_the_same_inputs(activation, dtype):
    x = (2 * torch.randn(7, 3, WIDTH)).to(dtype)
    fused = output_and_grads(TorchActivationLayerNorm(activation), x, ffn_layernorm(dtype), dtype)
    reference = output_and_grads(unfused(activation), x.float(), ffn_layernorm(dtype).float(), dtype)
    tolerance = 2**-7 if dtype == torch.bfloat16 else 2**-10  # two units in the last place
    for name, got, want in zip(["output", "dx", "dweight", "dbias"], fused, reference):
        assert got.dtype == dtype
        # fp32 arithmetic, one rounding of each result to bf16/fp16; near 0, relative to the largest value
        atol = tolerance * want.abs().max().item()
        torch.testing.assert_close(got.float(), want, rtol=tolerance, atol=atol, msg=lambda m: f"{name}: {m}")


# fairseq's gelu computes in fp32 whatever its input; torch's is the same function at the input's precision.
FP64_ACTIVATIONS = {name: utils.get_activation_fn(name) for name in ACTIVATIONS} | {"gelu": F.gelu}


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gradcheck_float64(activation):
    torch.manual_seed(0)
    x, weight, bias = (torch.randn(shape, dtype=torch.float64, requires_grad=True) for shape in [(3, 2, 7), 7, 7])
    fn = lambda x, w, b: TorchActivationLayerNormFunction.apply(x, w, b, 1e-5, FP64_ACTIVATIONS[activation])  # noqa
    assert torch.autograd.gradcheck(fn, (x, weight, bias))


# -- in a layer --
T, B, D = 9, 5, 40
FFN = 4 * D
FFN_ACTIVATION_SIZE = T * B * FFN  # differs from D*FFN, T*B*D and T*T*B*heads: sizes do not collide


def layer(scale_fc: bool, fused: bool = True) -> NormFormerLayer:
    torch.manual_seed(0)
    built = NormFormerLayer(LayerConfig(D, FFN, 4, scale_fc=scale_fc, layernorm_impl="torch"))
    if not fused:
        built.ffn_act_norm = None  # activation and FFN LN as two ops
    return built


def test_normformer_layer_uses_it_only_without_activation_dropout():
    assert isinstance(layer(scale_fc=True).ffn_act_norm, TorchActivationLayerNorm)
    config = LayerConfig(D, FFN, 4, scale_fc=True, activation_dropout=0.1, layernorm_impl="torch")
    assert NormFormerLayer(config).ffn_act_norm is None


def test_normformer_layer_fused_equals_unfused():
    fused, unfused_layer = layer(scale_fc=True), layer(scale_fc=True, fused=False)
    x = torch.randn(T, B, D)
    outputs = []
    for module in (fused, unfused_layer):
        h = x.clone().requires_grad_()
        y = module(h)
        y.pow(2).sum().backward()
        outputs.append([y, h.grad] + [p.grad for p in module.parameters()])
    for got, want in zip(*outputs):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def saved_ffn_activations(module: nn.Module) -> int:
    """How many distinct (T, B, F) tensors a forward keeps for backward."""
    saved = {}

    def pack(tensor):
        if tensor.numel() == FFN_ACTIVATION_SIZE:
            saved[tensor.untyped_storage().data_ptr()] = tensor
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(torch.randn(T, B, D, requires_grad=True))
    return len(saved)


def bytes_live_after_forward(module: nn.Module) -> int:
    """Bytes the forward allocated and did not free (what it keeps for backward, and its output)."""
    x = torch.randn(T, B, D, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        y = module(x)
    events = prof.profiler.kineto_results.events()
    del y
    return sum(e.nbytes() for e in events if e.name() == "[memory]")


def test_fused_ffn_layer_norm_keeps_no_extra_ffn_sized_tensor():
    pre_ln = saved_ffn_activations(layer(scale_fc=False))
    assert pre_ln == 2, "a Pre-LN FFN keeps FC1's output (for GELU) and GELU's output (for FC2)"
    assert saved_ffn_activations(layer(scale_fc=True)) == pre_ln
    assert saved_ffn_activations(layer(scale_fc=True, fused=False)) == pre_ln + 1  # the count can see it


def test_fused_ffn_layer_norm_keeps_only_statistics_in_bytes():
    pre_ln = bytes_live_after_forward(layer(scale_fc=False))
    statistics = 2 * T * B * 4  # mean and 1/std per row, fp32
    assert bytes_live_after_forward(layer(scale_fc=True)) - pre_ln <= statistics
    assert bytes_live_after_forward(layer(scale_fc=True, fused=False)) - pre_ln >= FFN_ACTIVATION_SIZE * 4

"""Each Triton kernel, forward and backward, against torch's LayerNorm and activations in fp64.

Widths are not powers of two, so every row is masked; 37 rows do not split evenly over the backward
kernel's programs. fp32 must match tightly; fp16 and bf16 inputs (fp32 statistics, output rounded to
the input's dtype) within a few units in the last place.
"""
import pytest
import torch
import torch.nn.functional as F
from fairseq.modules.gelu import gelu, gelu_accurate
from fairseq.utils import relu_squared

from fairseq_normformer.kernels.triton_layer_norm import TritonLayerNorm, layer_norm

# fairseq's own activation functions (gelu is torch's erf GELU computed in fp32).
REFERENCE_ACTIVATIONS = {"relu": F.relu, "gelu": gelu, "gelu_accurate": gelu_accurate, "relu_squared": relu_squared}
# (rtol, atol) against fp64. Triton's interpreter rounds fp32 -> bf16 toward zero (CUDA: to nearest),
# so the bf16 bound is about one of its ulps (2^-7 relative).
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1.5e-2)}
ROWS = 37


def _inputs(width, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = 2 * torch.randn(ROWS, width, generator=g) + 0.5  # both signs, so the activation matters
    weight = 1 + 0.5 * torch.randn(width, generator=g)
    bias = torch.randn(width, generator=g)
    grad_out = torch.randn(ROWS, width, generator=g)
    return [t.to(device=device, dtype=dtype) for t in (x, weight, bias, grad_out)]


def _output_and_grads(fn, x, weight, bias, grad_out):
    x, weight, bias = (t.detach().requires_grad_() for t in (x, weight, bias))
    y = fn(x, weight, bias)
    return [y, *torch.autograd.grad(y, (x, weight, bias), grad_out)]


def _assert_matches_reference(activation, reference_fn, width, dtype, device):
    x, weight, bias, grad_out = _inputs(width, dtype, device)
    got = _output_and_grads(lambda *a: layer_norm(*a, eps=1e-5, activation=activation), x, weight, bias, grad_out)
    ref_inputs = [t.cpu().double() for t in (x, weight, bias, grad_out)]
    expected = _output_and_grads(
        lambda x, w, b: F.layer_norm(reference_fn(x), (width,), w, b, eps=1e-5), *ref_inputs
    )
    rtol, atol = TOLERANCES[dtype]
    for name, a, e in zip(["output", "grad x", "grad weight", "grad bias"], got, expected):
        assert a.dtype == dtype, name
        torch.testing.assert_close(a.cpu().double(), e, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [96, 200, 770])
def test_layer_norm_matches_torch(width, dtype, device):
    _assert_matches_reference("linear", lambda x: x, width, dtype, device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", sorted(REFERENCE_ACTIVATIONS))
def test_activation_layer_norm_matches_torch(activation, dtype, device):
    _assert_matches_reference(activation, REFERENCE_ACTIVATIONS[activation], 200, dtype, device)


@pytest.mark.parametrize("activation", sorted(REFERENCE_ACTIVATIONS))
def test_activation_layer_norm_wide_rows(activation, device):
    _assert_matches_reference(activation, REFERENCE_ACTIVATIONS[activation], 770, torch.float32, device)


def test_module_is_a_drop_in_for_nn_layer_norm(device):
    """Same parameters and state dict as nn.LayerNorm, same output on 3-D (T, B, C) input."""
    torch.manual_seed(0)
    reference = torch.nn.LayerNorm(72, eps=1e-6)
    torch.nn.init.normal_(reference.weight)
    torch.nn.init.normal_(reference.bias)
    triton_norm = TritonLayerNorm(72, eps=1e-6).to(device)
    triton_norm.load_state_dict(reference.state_dict())
    x = torch.randn(5, 3, 72)
    torch.testing.assert_close(triton_norm(x.to(device)).cpu(), reference(x), rtol=1e-5, atol=1e-5)

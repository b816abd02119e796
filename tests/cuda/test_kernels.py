"""The Triton LayerNorm and activation→LN kernels on the GPU against torch in fp64 (the interpreter's tests,
tests/kernels/triton_cases, at the models' widths): fp32, fp16 and bf16, forward and backward, widths 768
to 4096 and odd ones (every row masked); ``--layernorm-impl auto`` choosing Triton on this GPU."""
import pytest
import torch

from fairseq_normformer.kernels.triton_layer_norm import ActivationLayerNorm, TritonLayerNorm
from fairseq_normformer.modules.layer_norm import resolve_layernorm_impl

from ..kernels.triton_cases.test_triton_layer_norm_kernels import REFERENCE_ACTIVATIONS, _assert_matches_reference
from ..models.lm_builders import TINY, normformer_lm, tiny_dictionary

pytestmark = pytest.mark.cuda
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                                 ids=lambda dtype: str(dtype).removeprefix("torch."))
WIDTHS = [768, 1024, 2048, 3072, 4096, 1000, 2047, 4097]  # the GPT-3 presets' d and 4d, then odd ones


@DTYPES
@pytest.mark.parametrize("width", WIDTHS)
def test_layer_norm_matches_torch_on_the_gpu(width, dtype):
    _assert_matches_reference("linear", lambda x: x, width, dtype, "cuda")


@DTYPES
@pytest.mark.parametrize("width", [768, 3072, 4095])
@pytest.mark.parametrize("activation", sorted(REFERENCE_ACTIVATIONS))
def test_activation_layer_norm_matches_torch_on_the_gpu(activation, width, dtype):
    _assert_matches_reference(activation, REFERENCE_ACTIVATIONS[activation], width, dtype, "cuda")


def test_auto_picks_triton_and_a_normformer_lm_runs_on_it():
    assert resolve_layernorm_impl("auto") == "triton"
    flags = TINY + ["--scale-attn", "--scale-fc", "--scale-heads", "--layernorm-impl", "auto"]
    model = normformer_lm(tiny_dictionary(), flags=flags).cuda()
    layer = model.decoder.layers[0]
    assert isinstance(layer.self_attn_layer_norm, TritonLayerNorm)
    assert isinstance(layer.ffn_act_norm, ActivationLayerNorm)  # activation and FFN LN in one Triton kernel
    tokens = torch.randint(4, 50, (2, 16), device="cuda")
    model(tokens)[0].float().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)

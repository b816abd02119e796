"""The FLOPs formula against torch's own count of a real training step's matrix multiplies."""
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.formulas import added_activation_bytes, matmul_weights, model_flops_per_step, model_shapes
from benchmarks.measure import Step

from .conftest import EMBED, FFN, LAYERS, TINY


@pytest.mark.parametrize("name", ["fairseq_transformer_lm", "fairseq_scale_flags", "preln", "normformer"])
def test_flops_formula_equals_flop_counter(name, build_tiny):
    """FlopCounterMode counts every mm/addmm/bmm of forward and backward; the math attention backend
    runs QKᵀ and AV as bmm over the full T×T matrix, as the formula counts them."""
    step = Step(build_tiny(name), TINY, "cpu")
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        step()
    shapes = model_shapes(step.model, TINY.seq_len, TINY.batch)
    assert shapes == {"layers": LAYERS, "embed": EMBED, "ffn": FFN, "vocab": 54, "seq_len": 16, "tokens": 32}
    assert counter.get_total_flops() == model_flops_per_step(shapes)


def test_matmul_weights_are_the_models_matrices(build_tiny):
    """N = every 2-D weight of the model (the embedding is the tied output projection)."""
    model = build_tiny("preln")
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    assert matmul_weights(model_shapes(model, 16, 2)) == matrices


def test_added_activation_bytes():
    shapes = {"layers": 6, "embed": 512, "ffn": 2048, "tokens": 2048}
    assert added_activation_bytes(shapes, 4) == 6 * (2048 * 512 + 512 * 512) * 4  # 30 MiB

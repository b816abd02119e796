"""The declared variants build the models they say, and the operation check catches one that does not."""
import pytest
import torch

from benchmarks.measure import Step
from benchmarks.variants import BY_NAME, VARIANTS, check_operations, variants_for

from .conftest import EMBED, FFN, HEADS, LAYERS, TINY


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def models(build_tiny):
    return {v.name: build_tiny(v.name) for v in variants_for("cpu")}


def test_triton_model_is_gpu_only_and_bf16_models_cpu_only():
    assert [v.name for v in variants_for("cpu")] == [v.name for v in VARIANTS if v.name != "normformer_triton"]
    assert [v.name for v in variants_for("cuda")] == [v.name for v in VARIANTS if not v.name.endswith("_bf16")]


@pytest.mark.parametrize("name", ["preln", "normformer"])
def test_bf16_variant_runs_in_bfloat16_with_the_fp32_loss(name, build_tiny):
    """The --bf16 variant's step (fairseq's Trainer cast) has bf16 weights, gradients and layer outputs,
    and the same weights give the fp32 variant's loss to bf16 precision on the same batch."""
    fp32, bf16 = BY_NAME[name], BY_NAME[f"{name}_bf16"]
    assert (fp32.dtype(TINY), bf16.dtype(TINY), bf16.fp32_variant) == (torch.float32, torch.bfloat16, name)
    steps = {v.name: Step(build_tiny(v.name), TINY, "cpu", v.dtype(TINY)) for v in (fp32, bf16)}
    steps[bf16.name].model.load_state_dict(steps[fp32.name].model.state_dict())  # cast to bf16 by load_state_dict
    layer_outputs = []
    for layer in steps[bf16.name].model.decoder.layers:
        layer.register_forward_hook(lambda module, inputs, output: layer_outputs.append(output[0].dtype))
    for step in steps.values():
        step.model.eval()  # no dropout: both see the same network
    losses = {n: step() for n, step in steps.items()}
    assert layer_outputs == [torch.bfloat16] * LAYERS
    assert {p.dtype for p in steps[bf16.name].model.parameters()} == {torch.bfloat16}
    assert {p.grad.dtype for p in steps[bf16.name].model.parameters()} == {torch.bfloat16}
    assert losses[bf16.name].item() == pytest.approx(losses[fp32.name].item(), rel=5e-3)
    assert losses[bf16.name].item() != losses[fp32.name].item()  # it did run at another precision


def test_normformer_adds_the_papers_parameters(models):
    """Post-Attn LN (2d), FFN LN (2f) and HeadScale (H) per layer: L·(2d+2f) + L·H."""
    added = LAYERS * (2 * EMBED + 2 * FFN) + LAYERS * HEADS
    assert _params(models["normformer"]) - _params(models["preln"]) == added
    assert _params(models["fairseq_scale_flags"]) - _params(models["fairseq_transformer_lm"]) == added


def test_fairseq_models_are_preln_like_ours(models):
    """fairseq's transformer_lm defaults to Post-LN; the declared flags make it Pre-LN with a final LN."""
    for name in ("fairseq_transformer_lm", "fairseq_scale_flags"):
        assert all(layer.normalize_before for layer in models[name].decoder.layers)
        assert models[name].decoder.layer_norm is not None
    assert _params(models["preln"]) == _params(models["fairseq_transformer_lm"])


def test_architectures_and_families(models):
    assert type(models["fairseq_transformer_lm"]).__module__.startswith("fairseq.models")
    assert type(models["preln"]).__module__.startswith("fairseq_normformer")


def test_operation_check_rejects_a_model_without_normformer(models):
    with pytest.raises(RuntimeError, match=r"normformer: the flags ask for \['scale_attn', 'scale_fc', 'scale_heads'\] but the layers have \[\]"):
        check_operations(BY_NAME["normformer"], models["preln"])
    with pytest.raises(RuntimeError, match=r"preln: the flags ask for \[\] but the layers have \['scale_attn', 'scale_fc', 'scale_heads'\]"):
        check_operations(BY_NAME["preln"], models["normformer"])

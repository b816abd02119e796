"""The declared variants build the models they say, and the operation check catches one that does not."""
import pytest

from benchmarks.variants import BY_NAME, VARIANTS, check_operations, variants_for

from .conftest import EMBED, FFN, HEADS, LAYERS


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def models(build_tiny):
    return {v.name: build_tiny(v.name) for v in variants_for("cpu")}


def test_cpu_variants_leave_out_only_the_triton_model():
    assert [v.name for v in variants_for("cpu")] == [v.name for v in VARIANTS if v.name != "normformer_triton"]
    assert variants_for("cuda") == list(VARIANTS)


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

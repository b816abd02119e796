"""The declared variants build the models they say, and the operation check catches one that does not."""
import dataclasses
import re
from pathlib import Path

import pytest
import torch

from benchmarks.measure import Step
from benchmarks.variants import (
    BY_NAME,
    NORM_SCHEME_VARIANTS,
    SMALL,
    VARIANTS,
    build_unchecked,
    check_operations,
    variants_for,
)

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


@pytest.mark.slow
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


# ------------------------------------------------------------------ normalization schemes (issue 41)
def _small_model_flags(recipe: str) -> set:
    """The flags of the small scale's CPU_MODEL and cpu_train in recipes/_lm_common.sh, as "--flag value" strings."""
    small = re.search(r'if \[ "\$SCALE" = small \]; then\s+CPU_MODEL=\(([^)]*)\)', recipe)[1]
    train = re.search(r"TRAIN=\(([^)]*)\)", recipe.split("cpu_train()", 1)[1])[1]
    wanted = r"--(decoder-[a-z-]+|share-decoder-input-output-embed|tokens-per-sample|batch-size|(attention-)?dropout)"
    return {m.group(0).strip() for m in re.finditer(wanted + r"( [0-9.]+)?", small + " " + train)}


def _pairs(flags) -> dict:
    """{--flag: its value, or None for a switch}."""
    flags = list(flags)
    return {a: (b if not b.startswith("--") else None) for a, b in zip(flags, flags[1:] + ["--"]) if a.startswith("--")}


def test_norm_scheme_shape_is_the_small_recipes():
    recipe = (Path(__file__).resolve().parents[2] / "recipes" / "_lm_common.sh").read_text()
    flags = _pairs(SMALL.shape_flags) | {"--tokens-per-sample": str(SMALL.seq_len), "--batch-size": str(SMALL.batch)}
    ours = {flag if value is None else f"{flag} {value}" for flag, value in flags.items()}
    assert _small_model_flags(recipe) <= ours and "--activation-fn" not in flags  # the recipe's: ReLU, the default


@pytest.fixture(scope="module")
def schemes(dict_dir):
    """The benchmark's variants and flags at the tiny dims (ReLU, as the small recipe)."""
    tiny_dims = {flag: value for flag, value in _pairs(TINY.shape_flags).items() if flag.startswith("--decoder-")}
    flags = _pairs(SMALL.shape_flags) | tiny_dims
    setup = dataclasses.replace(SMALL, shape_flags=tuple(x for k, v in flags.items() for x in (k, v) if x is not None))
    return {v.name: build_unchecked(v, setup, dict_dir) for v in NORM_SCHEME_VARIANTS}


@pytest.mark.slow
def test_each_scheme_adds_its_parameters(schemes):
    """Against Pre-LN, by formula (docs/model.md): d, f, H, h = d/H, L layers; 2L + 1 norms (the final one)."""
    d, f, heads, L = EMBED, FFN, HEADS, LAYERS
    normformer = L * (2 * d + 2 * f) + L * heads
    added = {"normformer": normformer, "normformer_compiled": normformer,
             **{f"normformer_{k}{c}": normformer - L * f for k in ("nobias", "rmsnorm") for c in ("", "_compiled")},
             "postln": -2 * d, "deepnorm": -2 * d, "sandwich": L * 4 * d, "qknorm": L * 4 * (d // heads),
             "rmsnorm": -(2 * L + 1) * d, "dyt": 2 * L + 1}  # fmt: skip
    assert {name: _params(m) - _params(schemes["preln"]) for name, m in schemes.items() if name != "preln"} == added


@pytest.mark.slow
def test_compiled_variants_compile_the_ffn_of_their_kind(schemes):
    kinds = {name: [layer.fc1_act_norm and layer.fc1_act_norm.kind for layer in m.decoder.layers]
             for name, m in schemes.items() if name.startswith("normformer")}  # fmt: skip
    assert kinds == {"normformer": [None] * LAYERS, "normformer_compiled": ["layernorm"] * LAYERS,
                     "normformer_nobias": [None] * LAYERS, "normformer_nobias_compiled": ["layernorm_nobias"] * LAYERS,
                     "normformer_rmsnorm": [None] * LAYERS, "normformer_rmsnorm_compiled": ["rmsnorm"] * LAYERS}
    layers = {name: schemes[name].decoder.layers[0] for name in ("postln", "deepnorm", "preln")}
    assert [(layer.normalize_before, layer.deepnorm_alpha) for layer in layers.values()] == [
        (False, None), (False, (2 * LAYERS) ** 0.25), (True, None)]  # DeepNorm's decoder-only α = (2M)^¼

"""The LayerNorm factory and --layernorm-impl: what each choice builds, what `auto` picks, and
the errors for choices this machine cannot run. (The Triton kernels' numerics are tested in
tests/kernels.)"""
import logging

import pytest
import torch
from torch import nn

from fairseq_normformer.modules import layer_norm as ln
from fairseq_normformer.modules.activation_layer_norm import TorchActivationLayerNorm
from tests.models.lm_builders import TINY, normformer_lm, tiny_dictionary


@pytest.fixture
def cpu_only(monkeypatch):
    """A machine without CUDA where Triton's interpreter is off."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_torch_impl_is_nn_layer_norm():
    norm = ln.LayerNorm(24, "torch", eps=1e-6)
    assert type(norm) is nn.LayerNorm and norm.normalized_shape == (24,) and norm.eps == 1e-6


def test_unknown_impl_names_the_choices():
    with pytest.raises(ValueError, match="'fused'.*auto, torch, apex, triton"):
        ln.resolve_layernorm_impl("fused")


def test_apex_without_apex_is_a_clear_error():
    if ln._apex_layer_norm_cls() is not None:
        pytest.skip("NVIDIA apex is installed here")
    with pytest.raises(ValueError, match="NVIDIA apex.*docs/kernels.md"):
        ln.resolve_layernorm_impl("apex")


def test_triton_without_cuda_is_a_clear_error(cpu_only):
    with pytest.raises(ValueError, match="--layernorm-impl=triton needs a CUDA GPU"):
        ln.resolve_layernorm_impl("triton")


def test_auto_on_cpu_is_torch_and_logged_once(cpu_only, monkeypatch, caplog):
    monkeypatch.setattr(ln, "_logged_choices", set())
    with caplog.at_level(logging.INFO, logger=ln.__name__):
        assert ln.resolve_layernorm_impl("auto") == "torch"
        assert ln.resolve_layernorm_impl("auto") == "torch"
    assert [r.getMessage() for r in caplog.records] == [
        "LayerNorm implementation: torch (--layernorm-impl=auto: no CUDA GPU)"
    ]


def fake_gpu(monkeypatch, capability, triton_ok=True, apex_ok=False):
    """A CUDA machine with a GPU of the given compute capability, triton and NVIDIA apex importable or not."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(ln, "_triton_kernels", lambda: object() if triton_ok else None)
    monkeypatch.setattr(ln, "_apex_layer_norm_cls", lambda: nn.LayerNorm if apex_ok else None)
    monkeypatch.setattr(ln, "_logged_choices", set())


# fmt: off
AUTO_CASES = [  # (GPU, capability, triton importable, apex importable, choice, why)
    ("H100", (9, 0), True, True, "triton", "CUDA capability 9.0, triton importable"),
    ("A100", (8, 0), True, False, "triton", "CUDA capability 8.0, triton importable"),
    ("A100", (8, 0), False, True, "apex", "triton not importable; NVIDIA apex importable"),
    ("A100", (8, 0), False, False, "torch", "triton not importable; NVIDIA apex not importable"),
    ("V100", (7, 0), True, True, "apex", "CUDA capability 7.0 < 8.0, Triton unsupported; NVIDIA apex importable"),
    ("V100", (7, 0), True, False, "torch",
     "CUDA capability 7.0 < 8.0, Triton unsupported; NVIDIA apex not importable"),
    ("T4", (7, 5), False, False, "torch",
     "CUDA capability 7.5 < 8.0, Triton unsupported; NVIDIA apex not importable"),
]
# fmt: on


@pytest.mark.parametrize("gpu, capability, triton_ok, apex_ok, expected, why", AUTO_CASES)
def test_auto_on_cuda_picks_triton_only_from_capability_8(
    monkeypatch, caplog, gpu, capability, triton_ok, apex_ok, expected, why
):
    fake_gpu(monkeypatch, capability, triton_ok, apex_ok)
    with caplog.at_level(logging.INFO, logger=ln.__name__):
        assert ln.resolve_layernorm_impl("auto") == expected
    assert [r.getMessage() for r in caplog.records] == [
        f"LayerNorm implementation: {expected} (--layernorm-impl=auto: {why})"
    ]


@pytest.mark.parametrize("capability", [(7, 0), (7, 5), (6, 1)])
def test_explicit_triton_below_capability_8_is_a_clear_error(monkeypatch, capability):
    fake_gpu(monkeypatch, capability)
    major, minor = capability
    expected = rf"triton needs a GPU of CUDA compute capability >= 8.0.*capability {major}\.{minor} < 8\.0"
    with pytest.raises(ValueError, match=expected):
        ln.resolve_layernorm_impl("triton")


def test_explicit_triton_from_capability_8_is_accepted_and_logged(monkeypatch, caplog):
    fake_gpu(monkeypatch, (8, 6))
    with caplog.at_level(logging.INFO, logger=ln.__name__):
        assert ln.resolve_layernorm_impl("triton") == "triton"
    assert [r.getMessage() for r in caplog.records] == ["LayerNorm implementation: triton (--layernorm-impl=triton)"]


def test_triton_module_keeps_nn_layer_norm_state_dict():
    norm = ln.LayerNorm(24, "triton", eps=1e-6)
    assert isinstance(norm, nn.LayerNorm) and norm.eps == 1e-6
    assert norm.state_dict().keys() == nn.LayerNorm(24).state_dict().keys()


def test_triton_module_rejects_too_wide_rows():
    with pytest.raises(ValueError, match="widths up to 16384, got 20000"):
        ln.LayerNorm(20000, "triton")


def test_triton_module_on_cpu_tensors_is_a_clear_error():
    kernels = ln._triton_kernels()
    if kernels.INTERPRETED:
        pytest.skip("this session runs Triton's interpreter, which accepts CPU tensors")
    with pytest.raises(RuntimeError, match="runs on CUDA tensors, got a tensor on cpu.*TRITON_INTERPRET=1"):
        ln.LayerNorm(24, "triton")(torch.randn(2, 24))


def test_fused_activation_norm_for_torch_and_triton_not_apex():
    torch_fused = ln.ActivationLayerNorm("tanh", "torch")
    assert isinstance(torch_fused, TorchActivationLayerNorm) and torch_fused.activation == "tanh"
    assert ln.ActivationLayerNorm("gelu", "apex") is None
    assert ln.ActivationLayerNorm("tanh", "triton") is None
    assert ln.ActivationLayerNorm("gelu", "triton").activation == "gelu"


def test_model_flag_triton_on_cpu_fails_at_build(cpu_only):
    with pytest.raises(ValueError, match="--layernorm-impl=triton needs a CUDA GPU"):
        normformer_lm(tiny_dictionary(), flags=TINY + ["--layernorm-impl", "triton"])


def test_model_flag_auto_builds_torch_layer_norms(cpu_only):
    model = normformer_lm(tiny_dictionary(), flags=TINY + ["--layernorm-impl", "auto", "--scale-fc"])
    layer = model.decoder.layers[0]
    assert type(layer.ffn_layernorm) is nn.LayerNorm and type(layer.ffn_act_norm) is TorchActivationLayerNorm

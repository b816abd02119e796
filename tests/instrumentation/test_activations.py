"""The activation monitor of the LR stability test, on NormFormer layers with planted overflows."""
import math

import pytest
import torch
from torch import nn

from fairseq_normformer.instrumentation import activations
from fairseq_normformer.instrumentation.activations import ActivationMonitor, max_abs_attention_logits
from fairseq_normformer.modules import LayerConfig, NormFormerLayer

D, HEADS = 32, 4


class Stack(nn.Module):
    def __init__(self, **switches):
        super().__init__()
        cfg = LayerConfig(D, 48, HEADS, **switches)
        self.layers = nn.ModuleList(NormFormerLayer(cfg) for _ in range(3))

    def forward(self, x):  # (T, B, C)
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture
def stack():
    torch.manual_seed(0)
    return Stack(scale_attn=True, scale_fc=True, scale_heads=True)


def first_overflow(model, threshold):
    with ActivationMonitor(model, threshold) as monitor:
        model(torch.randn(10, 2, D))
    return monitor.first_overflow()


def explicit_logits(q, k):
    """q·k/sqrt(d_head) of every head and (query, key) pair, by einsum. q, k: (T, B, C)."""
    q, k = (t.unflatten(-1, (HEADS, D // HEADS)) for t in (q, k))  # (T, B, H, Dh)
    return torch.einsum("tbhd,sbhd->bhts", q, k) / math.sqrt(D // HEADS)


def heads(x):
    """(T, B, C) -> (B, H, T, Dh), the layout SDPA receives."""
    return x.unflatten(-1, (HEADS, D // HEADS)).permute(1, 2, 0, 3)


@pytest.mark.parametrize("chunk_elements", [1 << 24, 7])  # one chunk, and one batch row per chunk
def test_attention_logits_maximum_matches_einsum(monkeypatch, chunk_elements):
    monkeypatch.setattr(activations, "_QK_CHUNK_ELEMENTS", chunk_elements)
    q, k = torch.randn(5, 3, D), torch.randn(5, 3, D) * 3
    expected = explicit_logits(q, k).abs().max()
    assert max_abs_attention_logits(heads(q), heads(k)).item() == pytest.approx(expected.item(), rel=1e-5)


def test_no_overflow_and_hooks_are_removed(stack):
    assert first_overflow(stack, 1e6) is None
    assert all(not m._forward_hooks for m in stack.modules())


def test_planted_fc2_overflow_in_layer_1_is_found_there(stack):
    with torch.no_grad():
        stack.layers[1].fc2.weight.mul_(1e6)
    overflow = first_overflow(stack, 1e4)
    assert (overflow.name, overflow.layer, overflow.operation) == ("layers.1.fc2", 1, "fc2")
    assert overflow.max_abs > 1e4


def test_attention_logits_overflow_before_q_and_k_do(stack):
    layer = stack.layers[0]
    with torch.no_grad():
        layer.self_attn.q_proj.weight.mul_(30)
        layer.self_attn.k_proj.weight.mul_(30)
    x = torch.randn(10, 2, D)
    with torch.no_grad():  # the q and k the layer's attention receives, computed by hand
        h = layer.self_attn_layer_norm(x)
        q, k = layer.self_attn.q_proj(h), layer.self_attn.k_proj(h)
    logits_max = explicit_logits(q, k).abs().max().item()
    largest_input = max(q.abs().max().item(), k.abs().max().item(), x.abs().max().item())
    threshold = math.sqrt(logits_max * largest_input)  # between the two
    assert largest_input < threshold < logits_max
    with ActivationMonitor(stack, threshold) as monitor:
        stack(x)
    overflow = monitor.first_overflow()
    assert (overflow.layer, overflow.operation) == (0, "self_attn.qk_logits")
    assert overflow.max_abs == pytest.approx(logits_max, rel=1e-4)


def test_paper_headscale_output_projection_is_watched(stack):
    """With HeadScale at the paper's position W^O runs as F.linear, not through out_proj's forward."""
    with torch.no_grad():
        stack.layers[2].self_attn.out_proj.weight.mul_(1e7)
    overflow = first_overflow(stack, 1e4)
    assert (overflow.layer, overflow.operation) == (2, "self_attn.out_proj")


def test_nan_counts_as_overflow(stack):
    with torch.no_grad():
        stack.layers[1].attn_ln.weight[0] = float("nan")
    overflow = first_overflow(stack, 1e30)
    assert (overflow.layer, overflow.operation) == (1, "attn_ln") and math.isnan(overflow.max_abs)


def test_threshold_must_be_positive(stack):
    with pytest.raises(ValueError, match="threshold must be positive"):
        ActivationMonitor(stack, 0)


def test_attention_logits_are_taken_after_qk_norm():
    """With --qk-norm the logits SDPA sees are those of the normalized q and k, not of the projections."""
    torch.manual_seed(0)
    model = Stack(qk_norm=True)
    attention = model.layers[0].self_attn
    with torch.no_grad():
        attention.q_norm.weight.mul_(4.0)  # off the projections' scale: the two readings differ
    x = torch.randn(10, 2, D)
    with torch.no_grad():
        h = model.layers[0].self_attn_layer_norm(x)
        q, k = attention.q_norm(heads(attention.q_proj(h))), attention.k_norm(heads(attention.k_proj(h)))
        expected = (q @ k.transpose(-1, -2)).abs().max().item() / math.sqrt(D // HEADS)
    with ActivationMonitor(model, 1e30) as monitor:
        model(x)
    recorded = dict(zip(monitor.names, monitor.maxima))["layers.0.self_attn.qk_logits"]
    assert recorded.item() == pytest.approx(expected, rel=1e-5)

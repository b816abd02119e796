"""A whole NormFormer layer with --layernorm-impl triton against the same layer with torch's
LayerNorm: same state dict (checkpoints load either way), same outputs and gradients."""
import pytest
import torch

from fairseq_normformer.modules import LayerConfig, NormFormerLayer

T, B, D, H, F = 5, 3, 48, 4, 120


def build(layernorm_impl, **switches):
    switches = {"scale_attn": True, "scale_fc": True, "scale_heads": True, **switches}
    return NormFormerLayer(LayerConfig(D, F, H, layernorm_impl=layernorm_impl, **switches))


def perturbed_torch_layer(**switches):
    """A torch layer whose LayerNorm gains and biases are not 1 and 0, so they are tested too; its
    activation and FFN LN run as two plain ops (not the torch path's fused function)."""
    torch.manual_seed(0)
    layer = build("torch", **switches)
    layer.ffn_act_norm = None
    with torch.no_grad():
        for p in layer.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    return layer


def output_and_grads(layer, x):
    x = x.detach().requires_grad_()
    y = layer(x)
    y.backward(torch.linspace(-1, 1, y.numel()).view_as(y))
    return y, x.grad, {name: p.grad for name, p in layer.named_parameters()}


@pytest.mark.parametrize(
    "switches",
    [{}, {"normalize_before": False}, {"activation_fn": "relu", "scale_qkv": True, "scale_resids": True}],
    ids=["preln-gelu", "postln-gelu", "relu-qkv-resids"],
)
def test_triton_layer_matches_torch_layer(switches, device):
    reference = perturbed_torch_layer(**switches)
    layer = build("triton", **switches)
    layer.load_state_dict(reference.state_dict())  # strict: the parameter names are the same
    assert layer.ffn_act_norm is not None, "the activation -> FFN LN pair should run as one kernel"
    x = torch.randn(T, B, D)
    y, x_grad, grads = output_and_grads(layer.to(device), x.to(device))
    y_ref, x_grad_ref, grads_ref = output_and_grads(reference, x)
    torch.testing.assert_close(y.cpu(), y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x_grad.cpu(), x_grad_ref, rtol=1e-5, atol=1e-5)
    assert grads.keys() == grads_ref.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad.cpu(), grads_ref[name], rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_activation_dropout_keeps_the_unfused_path():
    """The fused kernel has no dropout: with activation dropout the two ops run separately."""
    assert build("triton", activation_dropout=0.1).ffn_act_norm is None
    assert build("triton", scale_fc=False).ffn_act_norm is None
    assert build("torch", activation_dropout=0.1).ffn_act_norm is None

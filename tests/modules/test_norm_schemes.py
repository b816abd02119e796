"""The normalization-bench schemes (--norm-type, --ffn-norm-type, --qk-norm, --sandwich-norm, --deepnorm,
--normformer-layers) against their equations written out in plain torch."""
import math
from dataclasses import replace

import pytest
import torch

from fairseq_normformer.checks import BadInput
from fairseq_normformer.modules import LayerConfig, NormFormerLayer, SelfAttention
from fairseq_normformer.modules.deepnorm import deepnorm_constants, deepnorm_init_
from fairseq_normformer.modules.layer_config import layers_of_spec
from fairseq_normformer.modules.layer_norm import Norm
from fairseq_normformer.hf.norm_kinds import NORM_KINDS

T, B, D, F, H = 5, 2, 24, 40, 3
EPS = 1e-5


def perturbed_(module, seed=0):
    """Every 1-d parameter (norm weights and biases, DyT's α) moved off its initial value."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    return module.eval()


def layer_norm_eq(x, g, b=None):  # (x − mean(x)) / sqrt(var(x) + ε) · g + b
    centered = x - x.mean(-1, keepdim=True)
    y = centered / torch.sqrt(centered.pow(2).mean(-1, keepdim=True) + EPS) * g
    return y if b is None else y + b


def rms_norm_eq(x, g):  # x / sqrt(mean(x²) + ε) · g
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * g


def dyt_eq(x, alpha, g, b):  # tanh(α x) · γ + β
    return torch.tanh(alpha * x) * g + b


def norm_eq(norm, x):
    """The equation of ``norm``'s kind, read off its parameters."""
    params = dict(norm.named_parameters())
    if "alpha" in params:
        return dyt_eq(x, params["alpha"], params["weight"], params["bias"])
    if isinstance(norm, torch.nn.RMSNorm):
        return rms_norm_eq(x, params["weight"])
    return layer_norm_eq(x, params["weight"], params.get("bias"))


@pytest.mark.parametrize("kind", list(NORM_KINDS))
def test_each_norm_kind_is_its_equation_with_its_parameter_count(kind):
    norm = perturbed_(Norm(kind, D))
    x = 3 * torch.randn(T, B, D) + 1
    expected = {"layernorm": layer_norm_eq, "layernorm_nobias": layer_norm_eq, "rmsnorm": rms_norm_eq, "dyt": dyt_eq,
                "none": lambda x: x}
    args = {"dyt": ("alpha", "weight", "bias"), "layernorm": ("weight", "bias"), "none": ()}.get(kind, ("weight",))
    params = dict(norm.named_parameters())
    torch.testing.assert_close(norm(x), expected[kind](x, *(params[a] for a in args)), atol=1e-5, rtol=1e-5)
    per_norm = NORM_KINDS[kind].per_norm
    assert sum(p.numel() for p in norm.parameters()) == {"2n": 2 * D, "n": D, "2n+1": 2 * D + 1, "0": 0}[per_norm]


def test_dyt_alpha_is_one_scalar_initialised_at_one_half():
    norm = Norm("dyt", D)
    assert norm.alpha.shape == (1,) and norm.alpha.item() == 0.5


def qk_norm_attention_eq(attn, x):
    """softmax(N(q_i) N(k_i)^T / sqrt(Dh)) v_i head by head, causal, N over each head's Dh features."""
    dh = D // H
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    heads = []
    for i in range(H):
        sl = slice(i * dh, (i + 1) * dh)
        qi = norm_eq(attn.q_norm, q[..., sl])
        ki = norm_eq(attn.k_norm, k[..., sl])
        scores = torch.einsum("tbd,sbd->bts", qi, ki) / math.sqrt(dh)
        scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
        heads.append(torch.einsum("bts,sbd->tbd", scores.softmax(-1), v[..., sl]))
    return attn.out_proj(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm", "dyt"])
def test_qk_norm_is_a_norm_of_each_heads_queries_and_keys(norm_type):
    attn = perturbed_(SelfAttention(LayerConfig(D, F, H, qk_norm=True, norm_type=norm_type)))
    x = torch.randn(T, B, D)
    torch.testing.assert_close(attn(x, causal=True), qk_norm_attention_eq(attn, x), atol=1e-5, rtol=1e-5)
    assert attn.q_norm.weight.shape == (D // H,)  # one norm over the head dim, shared by the heads


def ffn_eq(layer, x, ffn_norm=None):
    h = torch.relu(layer.fc1(x))
    return layer.fc2(h if ffn_norm is None else norm_eq(ffn_norm, h))


@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
def test_sandwich_norm_normalizes_each_sublayers_output_before_the_residual(norm_type):
    layer = perturbed_(NormFormerLayer(LayerConfig(D, F, H, activation_fn="relu", sandwich_norm=True, norm_type=norm_type)))
    x = torch.randn(T, B, D)
    h = x + norm_eq(layer.attn_ln, layer.self_attn(norm_eq(layer.self_attn_layer_norm, x), causal=True))
    expected = h + norm_eq(layer.ffn_out_ln, ffn_eq(layer, norm_eq(layer.final_layer_norm, h)))
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


def test_sandwich_norms_attention_half_is_post_attn_ln():
    """--sandwich-norm --scale-attn builds the same layer as --sandwich-norm: one attn_ln."""
    names = lambda **s: [n for n, _ in NormFormerLayer(LayerConfig(D, F, H, **s)).named_parameters()]  # noqa: E731
    assert names(sandwich_norm=True) == names(sandwich_norm=True, scale_attn=True)


@pytest.mark.parametrize("ffn_norm_type", ["layernorm_nobias", "rmsnorm"])
def test_ffn_norm_type_sets_the_ffn_ln_alone(ffn_norm_type):
    cfg = LayerConfig(D, F, H, activation_fn="relu", scale_fc=True, ffn_norm_type=ffn_norm_type)
    layer = perturbed_(NormFormerLayer(cfg))
    assert layer.ffn_act_norm is None  # the fused activation + LayerNorm reads a LayerNorm's bias
    x = torch.randn(T, B, D)
    torch.testing.assert_close(layer.feed_forward(x), ffn_eq(layer, x, layer.ffn_layernorm), atol=1e-5, rtol=1e-5)
    assert type(layer.final_layer_norm) is torch.nn.LayerNorm  # the other norms keep --norm-type
    assert sum(p.numel() for p in layer.ffn_layernorm.parameters()) == F  # no bias


def test_deepnorm_constants_are_deepnet_table_1():
    assert deepnorm_constants("decoder-only", 0, 2) == pytest.approx((4 ** 0.25, 16 ** -0.25))  # (2M)^¼, (8M)^-¼
    assert deepnorm_constants("encoder-only", 18, 0) == pytest.approx((6 ** 0.5, 12 ** -0.5))  # (2N)^¼, (8N)^-¼
    assert deepnorm_constants("encoder", 1, 1) == pytest.approx((0.81, 0.87))  # 0.81 (N⁴M)^(1/16), 0.87 (N⁴M)^(-1/16)
    assert deepnorm_constants("encoder", 2, 16) == pytest.approx((0.81 * 2 ** 0.5, 0.87 * 2 ** -0.5))
    assert deepnorm_constants("decoder", 6, 27) == pytest.approx((3.0, 324 ** -0.25))  # (3M)^¼, (12M)^-¼


def test_deepnorm_layer_is_post_ln_with_alpha_on_each_residual():
    alpha = 1.7
    layer = perturbed_(NormFormerLayer(LayerConfig(D, F, H, activation_fn="relu", normalize_before=False,
                                                   deepnorm_alpha=alpha, deepnorm_beta=0.5)))  # fmt: skip
    x = torch.randn(T, B, D)
    h = norm_eq(layer.self_attn_layer_norm, alpha * x + layer.self_attn(x, causal=True))
    expected = norm_eq(layer.final_layer_norm, alpha * h + ffn_eq(layer, h))
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


def test_deepnorm_init_scales_value_output_and_ffn_weights_by_beta():
    def layer():
        torch.manual_seed(0)
        return NormFormerLayer(LayerConfig(D, F, H))

    plain, scaled = layer(), layer()
    deepnorm_init_(torch.nn.ModuleList([scaled]), 0.25)
    for name, p in scaled.named_parameters():
        factor = 0.25 if name in ("self_attn.v_proj.weight", "self_attn.out_proj.weight", "fc1.weight", "fc2.weight") else 1
        torch.testing.assert_close(p, factor * dict(plain.named_parameters())[name], atol=0, rtol=0)


@pytest.mark.parametrize("spec, layers", [("all", (0, 1, 2, 3)), ("first:1", (0,)), ("last:2", (2, 3)),
                                          ("3,0", (0, 3)), ("first:0", ())])  # fmt: skip
def test_normformer_layers_spec(spec, layers):
    assert layers_of_spec(spec, 4) == layers


@pytest.mark.parametrize("spec", ["first:5", "4", "0,,1", "middle:1", "-1", "first"])
def test_bad_normformer_layers_spec_names_the_flag(spec):
    with pytest.raises(BadInput, match=r"^--normformer-layers '.*': expected all, first:K"):
        layers_of_spec(spec, 4)


def test_layers_outside_the_spec_lose_the_papers_operations_only():
    cfg = LayerConfig(D, F, H, scale_attn=True, scale_fc=True, scale_heads=True, qk_norm=True, normformer_layers="last:1")
    first, last = cfg.for_layer(0, 2), cfg.for_layer(1, 2)
    assert last == replace(cfg, layer_number=2)  # in the spec: only its 1-based number set
    assert not (first.scale_attn or first.scale_fc or first.scale_heads) and first.qk_norm

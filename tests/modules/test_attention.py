"""SelfAttention vs explicit formulas and fairseq's MultiheadAttention."""
import math

import pytest
import torch
from fairseq.modules import MultiheadAttention

from fairseq_normformer.modules import LayerConfig, SelfAttention

T, B, D, H = 7, 3, 24, 4


def make(**switches):
    torch.manual_seed(0)
    attn = SelfAttention(LayerConfig(embed_dim=D, ffn_embed_dim=2 * D, attention_heads=H, **switches))
    with torch.no_grad():
        for p in attn.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    return attn.eval()


def explicit_eq3(attn, x, causal=True):
    """Eq. 3 written out head by head: Concat(γ_1 h_1, ..., γ_n h_n) W^O + b."""
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)  # (T, B, D)
    dh = D // H
    heads = []
    for i in range(H):
        sl = slice(i * dh, (i + 1) * dh)
        scores = torch.einsum("tbd,sbd->bts", q[..., sl], k[..., sl]) / math.sqrt(dh)
        if causal:
            scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
        h_i = torch.einsum("bts,sbd->tbd", scores.softmax(-1), v[..., sl])
        heads.append(attn.head_scale[i] * h_i)
    return attn.out_proj(torch.cat(heads, dim=-1))


def test_paper_head_scale_is_eq3():
    attn = make(scale_heads=True)
    x = torch.randn(T, B, D)
    torch.testing.assert_close(attn(x, causal=True), explicit_eq3(attn, x), atol=1e-6, rtol=1e-5)


def test_head_scale_of_ones_is_identity():
    x = torch.randn(T, B, D)
    plain = make()
    scaled = make(scale_heads=True)
    scaled.load_state_dict(plain.state_dict(), strict=False)  # same weights
    torch.nn.init.ones_(scaled.head_scale)
    torch.testing.assert_close(scaled(x, causal=True), plain(x, causal=True), atol=0, rtol=0)


def test_after_wo_scales_output_chunks_bias_included():
    attn = make(scale_heads=True, head_scale_position="after_wo")
    x = torch.randn(T, B, D)
    head_scale = attn.head_scale
    attn.head_scale = None  # plain attention, then fairseq's chunk scaling (transformer_layer.py)
    plain = attn(x, causal=True)
    attn.head_scale = head_scale
    expected = torch.einsum("tbhd,h->tbhd", plain.view(T, B, H, D // H), head_scale).reshape(T, B, D)
    torch.testing.assert_close(attn(x, causal=True), expected, atol=1e-6, rtol=1e-5)


def test_paper_and_after_wo_differ():
    x = torch.randn(T, B, D)
    paper, after = make(scale_heads=True), make(scale_heads=True, head_scale_position="after_wo")
    assert (paper(x, causal=True) - after(x, causal=True)).abs().max() > 1e-3


@pytest.mark.parametrize("causal", [True, False])
def test_matches_fairseq_multihead_attention_with_padding(causal):
    ours = make()
    theirs = MultiheadAttention(D, H, self_attention=True).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    x = torch.randn(T, B, D)
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[0, -2:] = True  # right padding
    padding[2, -4:] = True
    future = torch.triu(torch.full((T, T), float("-inf")), 1) if causal else None
    expected, _ = theirs(x, x, x, key_padding_mask=padding, attn_mask=future, need_weights=False)
    got = ours(x, key_padding_mask=padding, causal=causal)
    keep = ~padding.t()[..., None]  # compare real positions
    torch.testing.assert_close(got * keep, expected * keep, atol=1e-5, rtol=1e-5)


def test_qkv_layernorms_act_on_projections():
    attn = make(scale_qkv=True)
    x = torch.randn(T, B, D)
    q = attn.q_ln(attn.q_proj(x))
    torch.testing.assert_close(q, torch.nn.functional.layer_norm(
        attn.q_proj(x), (D,), attn.q_ln.weight, attn.q_ln.bias), atol=1e-6, rtol=1e-6)
    plain = make()
    plain.load_state_dict(attn.state_dict(), strict=False)
    assert (attn(x, causal=True) - plain(x, causal=True)).abs().max() > 1e-3


def test_left_padded_query_rows_stay_finite():
    attn = make()
    x = torch.randn(T, B, D)
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[1, :3] = True  # a left-padded prompt: its first queries see only padding
    assert torch.isfinite(attn(x, key_padding_mask=padding, causal=True)).all()

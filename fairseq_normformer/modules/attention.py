"""Multi-head self-attention through ``F.scaled_dot_product_attention``, with the two NormFormer
operations that act inside it: HeadScale (Eq. 3) and LayerNorm on q, k, v (Table 5)."""
from dataclasses import replace
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

from .layer_config import LayerConfig
from .layer_norm import Norm

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


@with_incremental_state
class SelfAttention(nn.Module):
    """Parameter names follow fairseq's MultiheadAttention (q_proj, k_proj, v_proj, out_proj)."""

    def __init__(self, cfg: LayerConfig):
        super().__init__()
        d = cfg.embed_dim
        self.num_heads = cfg.attention_heads
        self.head_dim = d // cfg.attention_heads
        self.dropout = cfg.attention_dropout
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        # Table 5, "+3 More LN": LayerNorm on the projected queries, keys and values.
        make_ln = lambda: Norm(cfg.norm_type, d, cfg.layernorm_impl) if cfg.scale_qkv else nn.Identity()  # noqa: E731
        self.q_ln, self.k_ln, self.v_ln = make_ln(), make_ln(), make_ln()
        # QK-norm (Henry et al. 2020): softmax(N(q_i) N(k_i)^T / sqrt(Dh)) with N a norm over each head's
        # Dh features, its weights shared by the heads (ViT-22B, Gemma 3; OLMo 2 normalizes all of q, k).
        make_qk = lambda: Norm(cfg.norm_type, self.head_dim, cfg.layernorm_impl)  # noqa: E731
        self.q_norm, self.k_norm = (make_qk(), make_qk()) if cfg.qk_norm else (nn.Identity(), nn.Identity())
        # HeadScale, Eq. 3: MultiHead(Q, K, V) = Concat(γ_1 h_1, ..., γ_n h_n) W^O.
        self.head_scale = nn.Parameter(torch.ones(self.num_heads)) if cfg.scale_heads else None
        self.head_scale_position = cfg.head_scale_position
        self.reset_parameters()

    def reset_parameters(self):
        """fairseq's MultiheadAttention initialisation, so baselines match fairseq's."""
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=2**-0.5)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.constant_(self.out_proj.bias, 0.0)

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        causal: bool = False,
        incremental_state: Optional[IncrementalState] = None,
    ) -> Tensor:
        tgt_len = x.size(0)  # x: (T, B, C)
        q = self.q_norm(self._split_heads(self.q_ln(self.q_proj(x))))  # (B, H, T, Dh)
        k = self.k_norm(self._split_heads(self.k_ln(self.k_proj(x))))
        v = self._split_heads(self.v_ln(self.v_proj(x)))
        if incremental_state is not None:
            k, v, key_padding_mask = self._extend_cache(incremental_state, k, v, key_padding_mask)
        mask = _attention_mask(tgt_len, k.size(2), key_padding_mask, causal, x.device)
        return self._attend(q, k, v, mask, is_causal=causal and mask is None and tgt_len > 1)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], is_causal: bool) -> Tensor:
        """q: (B, H, T, Dh), k and v: (B, H, S, Dh) -> (T, B, C), through HeadScale and W^O."""
        bsz, _, tgt_len, _ = q.shape
        dropout_p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
        y = y.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.num_heads * self.head_dim)  # (T, B, C)
        return self._output_projection(y)

    # Named probe points for instrumentation (instrumentation/activations.py, diagnostics.py): the modules whose
    # outputs are the queries and keys SDPA receives, (B, H, T, Dh) — q_norm/k_norm, QK-norm or Identity.
    @property
    def query_probe(self) -> nn.Module:
        return self.q_norm

    @property
    def key_probe(self) -> nn.Module:
        return self.k_norm

    def _split_heads(self, x: Tensor) -> Tensor:
        tgt_len, bsz, _ = x.shape
        return x.view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _output_projection(self, y: Tensor) -> Tensor:
        if self.head_scale is None:
            return self.out_proj(y)
        if self.head_scale_position == "paper":
            # Eq. 3: γ_i scales head i's output *before* W^O. Folded into W^O's input columns,
            # Concat(γ_i h_i) W^T = Concat(h_i) (W diag(γ ⊗ 1_Dh))^T, so no activation-sized tensor is made.
            weight = self.out_proj.weight * self.head_scale.repeat_interleave(self.head_dim)
            return F.linear(y, weight, self.out_proj.bias)
        # "after_wo", fairseq's variant (fairseq issues #3973, #3983): γ_i scales the i-th chunk
        # of W^O's *output*, bias included.
        out = self.out_proj(y)
        return (out.unflatten(-1, (self.num_heads, self.head_dim)) * self.head_scale[:, None]).flatten(-2)

    # -- incremental decoding: keys and values of earlier steps, stored as (B, H, S, Dh) --
    def _get_input_buffer(self, incremental_state: Optional[IncrementalState]) -> Dict[str, Optional[Tensor]]:
        return self.get_incremental_state(incremental_state, "attn_state") or {}

    def _extend_cache(self, incremental_state, k, v, key_padding_mask):
        cache = self._get_input_buffer(incremental_state)
        if "prev_key" in cache:
            prev_len = cache["prev_key"].size(2)
            k = torch.cat([cache["prev_key"], k], dim=2)
            v = torch.cat([cache["prev_value"], v], dim=2)
            key_padding_mask = _append_padding(cache.get("prev_key_padding_mask"), key_padding_mask, prev_len, k)
        cache = {"prev_key": k, "prev_value": v, "prev_key_padding_mask": key_padding_mask}
        self.set_incremental_state(incremental_state, "attn_state", cache)
        return k, v, key_padding_mask

    def reorder_incremental_state(self, incremental_state: IncrementalState, new_order: Tensor):
        """Beam search: reorder the cached keys and values along the batch dimension."""
        cache = self._get_input_buffer(incremental_state)
        for key, value in cache.items():
            if value is not None:
                cache[key] = value.index_select(0, new_order)
        self.set_incremental_state(incremental_state, "attn_state", cache)
        return incremental_state


class EncoderAttention(SelfAttention):
    """The decoder's attention to the encoder output (fairseq's ``encoder_attn``): queries from the decoder,
    keys and values from the encoder, computed once per source and cached for incremental decoding.
    HeadScale here is ``--scale-enc-heads``, our extension (not in the paper); no QKV LN, no QK-norm."""

    def __init__(self, cfg: LayerConfig):
        super().__init__(replace(cfg, scale_qkv=False, qk_norm=False, scale_heads=cfg.scale_enc_heads))

    def forward(
        self,
        x: Tensor,
        encoder_out: Tensor,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[IncrementalState] = None,
    ) -> Tensor:
        """x: (T, B, C); encoder_out: (S, B, C); encoder_padding_mask: (B, S), True at padding."""
        q = self._split_heads(self.q_proj(x))
        k, v = self._encoder_keys_values(encoder_out, incremental_state)
        # True = may attend; a source sentence always has a token, so no row is all padding.
        mask = None if encoder_padding_mask is None else ~encoder_padding_mask.bool()[:, None, None, :]
        return self._attend(q, k, v, mask, is_causal=False)

    def _encoder_keys_values(self, encoder_out: Tensor, incremental_state: Optional[IncrementalState]):
        cache = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        if "prev_key" in cache:  # static: the encoder output does not change between decoding steps
            return cache["prev_key"], cache["prev_value"]
        k, v = self._split_heads(self.k_proj(encoder_out)), self._split_heads(self.v_proj(encoder_out))
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "attn_state", {"prev_key": k, "prev_value": v})
        return k, v


def _append_padding(prev: Optional[Tensor], new: Optional[Tensor], prev_len: int, k: Tensor):
    """Concatenate key padding masks of earlier steps and this one; None when nothing is padded."""
    if prev is None and new is None:
        return None
    bsz, new_len = k.size(0), k.size(2) - prev_len
    prev = prev if prev is not None else k.new_zeros(bsz, prev_len, dtype=torch.bool)
    new = new if new is not None else k.new_zeros(bsz, new_len, dtype=torch.bool)
    return torch.cat([prev, new.bool()], dim=1)


def _attention_mask(tgt_len, src_len, key_padding_mask, causal, device) -> Optional[Tensor]:
    """A boolean mask (True = may attend) for SDPA, or None when SDPA's own is_causal suffices."""
    if key_padding_mask is None and (not causal or tgt_len in (1, src_len)):
        return None
    allowed = torch.ones(tgt_len, src_len, dtype=torch.bool, device=device)
    if causal:  # the T queries are the last T of the S positions
        allowed = allowed.tril(diagonal=src_len - tgt_len)
    if key_padding_mask is not None:  # (B, S), True at padding
        allowed = allowed & ~key_padding_mask.bool()[:, None, None, :]  # (B, 1, T, S)
    # A query whose keys are all padding (left-padded prompts) attends to itself, not to nothing (NaN).
    diagonal = torch.eye(src_len, dtype=torch.bool, device=device)[src_len - tgt_len :]
    return allowed | diagonal

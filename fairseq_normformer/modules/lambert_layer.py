"""LaMBERT's segment layout and two-phase attention layer (docs/lambert.md).

A pair ``[CLS] A [SEP] B [SEP]`` (fairseq's flat batch) becomes *blocks*: each sentence is cut into
segments of M tokens (the last one padded), and the segments of the whole batch are packed, so
there are N = Σ_b (segments of pair b) blocks and no block of pure padding. A block holds its M
tokens and, as row M, its segment embedding. In every layer:

* phase 1: the M tokens and the segment embedding of block (b, i) attend over the block's tokens
  and over all segment embeddings s_j of pair b, mapped by P_ij(s_j) = s_j + r_{j-i} (``relative``)
  or P_ij(s_j) = s_j (``none``) — batched block attention, (M+1) queries × (M+S) keys per block;
* phase 2: [CLS] attends over itself and all segment embeddings of its pair (cross-attention).

The layer is a ``NormFormerLayer``: its LayerNorms, FFN and every switch of the operations table
act on both phases, which share its weights.
"""
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import SelfAttention
from .layer_config import LayerConfig
from .normformer_layer import NormFormerLayer

SEGMENT_MAPS = ["relative", "none"]


@dataclass
class SegmentLayout:
    """Where the tokens of a flat (B, T) batch go among N blocks of M tokens, and the attention masks."""

    block_tokens: Tensor  # (N, M) token ids, padding after a short segment's last token
    block_example: Tensor  # (N,) the pair b of each block
    block_position: Tensor  # (N,) its segment index j in the pair (A's segments first, then B's)
    block_sentence: Tensor  # (N,) 0 for A, 1 for B
    segments_in_a: Tensor  # (B,)
    num_segments: Tensor  # (B,)
    token_rows: Tensor  # (K,) flat index b·T + t of each content token (neither [CLS], [SEP] nor padding)
    token_blocks: Tensor  # (K,) its block
    token_slots: Tensor  # (K,) its place in the block, 0..M-1
    seq_len: int
    max_segments: int  # S of this batch (the longest pair's segment count)
    _offsets: dict = field(default_factory=dict, repr=False)  # segment_offsets, computed once per batch

    @property
    def batch(self) -> int:
        return self.num_segments.numel()

    @property
    def block_padding(self) -> Tensor:  # (N, M) True at padding
        return self.block_tokens.eq(-1)

    @cached_property  # index tensors: computed once per batch, not once per layer
    def segment_padding(self) -> Tensor:  # (B, S) True where pair b has no segment j
        return torch.arange(self.max_segments, device=self.num_segments.device) >= self.num_segments[:, None]

    @cached_property
    def segment_index(self) -> Tensor:  # (N,) row of each block in a flattened (B·S) segment matrix
        return self.block_example * self.max_segments + self.block_position

    def phase1_mask(self) -> Tensor:
        """(N, 1, 1, M+S) bool, True = may attend (the same for the M+1 queries of a block): the block's
        real tokens and its pair's segments."""
        keys = torch.cat([~self.block_padding, ~self.segment_padding[self.block_example]], dim=1)
        return keys[:, None, None, :]

    def phase2_mask(self) -> Tensor:
        """(B, 1, 1, 1+S): [CLS] itself and its pair's segments."""
        itself = torch.ones_like(self.num_segments, dtype=torch.bool)[:, None]
        return torch.cat([itself, ~self.segment_padding], dim=1)[:, None, None, :]

    def segment_offsets(self, max_offset: int) -> Tensor:
        """(N, S) j - i + max_offset of every (block i, segment j): rows of a (2·max_offset + 1)-row table."""
        if max_offset not in self._offsets:
            j = torch.arange(self.max_segments, device=self.block_position.device)
            self._offsets[max_offset] = j[None, :] - self.block_position[:, None] + max_offset
        return self._offsets[max_offset]


def segment_layout(src_tokens: Tensor, pad: int, sep: int, segment_length: int) -> SegmentLayout:
    """Cut each pair's A and B (without [CLS] and [SEP]) into segments of ``segment_length`` tokens."""
    bsz, seq_len = src_tokens.shape
    m = segment_length
    is_sep = src_tokens.eq(sep)
    sentence = (is_sep.long().cumsum(1) - is_sep.long()).gt(0).long()  # 0 up to the first [SEP], 1 after
    content = src_tokens.ne(pad) & ~is_sep
    content[:, 0] = False  # [CLS]
    in_a = (content & sentence.eq(0)).sum(1)
    in_b = (content & sentence.eq(1)).sum(1)
    segments_in_a = (in_a + m - 1) // m
    num_segments = segments_in_a + (in_b + m - 1) // m
    rank = content.long().cumsum(1) - 1 - sentence * in_a[:, None]  # place within its sentence
    position = rank // m + sentence * segments_in_a[:, None]  # segment index in the pair
    first_block = num_segments.cumsum(0) - num_segments
    rows = content.flatten().nonzero().squeeze(1)
    example = rows // seq_len
    token_blocks = (first_block[:, None] + position).flatten()[rows]
    token_slots = (rank % m).flatten()[rows]
    n_blocks = int(num_segments.sum())
    block_tokens = src_tokens.new_full((n_blocks, m), -1)
    block_tokens[token_blocks, token_slots] = src_tokens.flatten()[rows]
    block_example = torch.repeat_interleave(torch.arange(bsz, device=src_tokens.device), num_segments)
    block_position = torch.arange(n_blocks, device=src_tokens.device) - first_block[block_example]
    return SegmentLayout(
        block_tokens=block_tokens,
        block_example=block_example,
        block_position=block_position,
        block_sentence=(block_position >= segments_in_a[block_example]).long(),
        segments_in_a=segments_in_a,
        num_segments=num_segments,
        token_rows=rows,
        token_blocks=token_blocks,
        token_slots=token_slots,
        seq_len=seq_len,
        max_segments=int(num_segments.max()) if bsz else 0,
    )


@dataclass
class LambertLayerConfig(LayerConfig):
    max_segments: int = 23  # S: the size of P's relative-offset table, 2S - 1
    segment_map: str = "relative"  # P_ij: "relative" s_j + r_{j-i}; "none" s_j

    def __post_init__(self):
        super().__post_init__()
        if self.segment_map not in SEGMENT_MAPS:
            raise ValueError(f"--segment-map={self.segment_map!r} is not one of {', '.join(SEGMENT_MAPS)}")


class TwoPhaseAttention(SelfAttention):
    """SelfAttention's projections, QKV LN and HeadScale, applied to LaMBERT's two phases."""

    def __init__(self, cfg: LambertLayerConfig):
        super().__init__(cfg)
        s = cfg.max_segments
        self.offset_embeddings = nn.Embedding(2 * s - 1, cfg.embed_dim) if cfg.segment_map == "relative" else None

    def segment_phase(self, x: Tensor, layout: SegmentLayout, mask: Tensor) -> Tensor:
        """x: (M+1, N, C), each block's tokens then its segment embedding -> (M+1, N, C)."""
        keys, values = self.k_proj(x), self.v_proj(x)  # tokens and segments in one matrix multiply each
        keys = torch.cat([keys[:-1], self._mapped_segments(self.k_proj, keys[-1], layout)])
        values = torch.cat([values[:-1], self._mapped_segments(self.v_proj, values[-1], layout)])
        return self._attend(x, keys, values, mask)

    def cls_phase(self, cls: Tensor, segments: Tensor, layout: SegmentLayout, mask: Tensor) -> Tensor:
        """cls: (1, B, C); segments: (N, C), the layer's (normalized) segment inputs -> (1, B, C)."""
        keys_in = torch.cat([cls, per_pair(segments, layout).transpose(0, 1)])  # (1+S, B, C)
        return self._attend(cls, self.k_proj(keys_in), self.v_proj(keys_in), mask)

    def _mapped_segments(self, proj: nn.Linear, projected: Tensor, layout: SegmentLayout) -> Tensor:
        """projected: (N, C), proj(s_j) of every block -> (S, N, C): proj(P_ij(s_j)) for every block i and
        segment j of its pair. For ``relative``, proj(s_j + r_{j-i}) = proj(s_j) + W r_{j-i}: the S·N sums
        cost no extra matrix multiply. Gathers are index_select (backward: index_add, not index_put)."""
        mapped = per_pair(projected, layout).index_select(0, layout.block_example)  # (N, S, C)
        if self.offset_embeddings is not None:
            offsets = layout.segment_offsets(self.offset_embeddings.num_embeddings // 2)
            table = F.linear(self.offset_embeddings.weight, proj.weight)
            mapped = mapped + table.index_select(0, offsets.flatten()).view_as(mapped)
        return mapped.transpose(0, 1)

    def _attend(self, queries_in: Tensor, keys: Tensor, values: Tensor, mask: Tensor) -> Tensor:
        tgt_len, bsz, embed_dim = queries_in.shape
        # q_norm and k_norm are Identity (lambert refuses --qk-norm); called, they are the instrumentation's probe points.
        q = self.q_norm(self._split_heads(self.q_ln(self.q_proj(queries_in))))
        k, v = self.k_norm(self._split_heads(self.k_ln(keys))), self._split_heads(self.v_ln(values))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self._output_projection(y.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim))


def per_pair(segments: Tensor, layout: SegmentLayout) -> Tensor:
    """(N, C) rows of the blocks -> (B, S, C), zeros where a pair has fewer segments. index_put saves only
    the index for backward (index_copy would keep ``segments``, and with it the (M+1, N, C) projection it
    is a row of, alive until backward)."""
    flat = segments.new_zeros(layout.batch * layout.max_segments, segments.size(-1))
    return flat.index_put((layout.segment_index,), segments).view(layout.batch, layout.max_segments, -1)


class LambertLayer(NormFormerLayer):
    """One LaMBERT layer: phase 1 on the blocks, phase 2 on [CLS], with the same weights."""

    def build_self_attention(self, cfg: LambertLayerConfig) -> nn.Module:
        return TwoPhaseAttention(cfg)

    def forward(
        self, blocks: Tensor, cls: Optional[Tensor], layout: SegmentLayout, masks: Tuple[Tensor, Tensor]
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """blocks: (M+1, N, C); cls: (1, B, C) or None (phase 2 skipped)."""
        segments = blocks[-1]  # this layer's input segment embeddings, for phase 2

        def attention(h):
            return self.attn_ln(self.self_attn.segment_phase(h, layout, masks[0]))

        blocks = self._sublayer(blocks, self.self_attn_layer_norm, attention)
        blocks = self._sublayer(blocks, self.final_layer_norm, self.feed_forward, self.w_resid)
        if cls is not None:
            cls = self.cls_phase(cls, segments, layout, masks[1])
        return blocks, cls

    def cls_phase(self, cls: Tensor, segments: Tensor, layout: SegmentLayout, mask: Tensor) -> Tensor:
        keys = self.self_attn_layer_norm(segments) if self.normalize_before else segments  # as phase 1 saw them

        def attention(h):
            return self.attn_ln(self.self_attn.cls_phase(h, keys, layout, mask))

        cls = self._sublayer(cls, self.self_attn_layer_norm, attention)
        return self._sublayer(cls, self.final_layer_norm, self.feed_forward, self.w_resid)

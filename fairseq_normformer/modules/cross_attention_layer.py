"""The NormFormer decoder layer of an encoder-decoder: self-attention, encoder attention, FFN.

NormFormerLayer (Fig. 1) with fairseq's encoder-attention sublayer between self-attention and the
FFN, on the same ``_sublayer`` path (Pre-LN or Post-LN). The paper has no encoder-decoder: the
NormFormer-style operations on the encoder attention (``--scale-enc-heads``, ``--scale-enc-attn``)
are our extension, off unless asked for. Parameter names follow fairseq's TransformerDecoderLayer.
"""
from typing import Optional

from torch import Tensor, nn

from .attention import EncoderAttention
from .layer_config import LayerConfig
from .layer_norm import Norm
from .normformer_layer import NormFormerLayer


class NormFormerCrossAttentionDecoderLayer(NormFormerLayer):
    def __init__(self, cfg: LayerConfig):
        if not cfg.causal:
            raise ValueError("NormFormerCrossAttentionDecoderLayer is a decoder layer: build it with causal=True")
        super().__init__(cfg)
        self.encoder_attn = EncoderAttention(cfg)  # HeadScale on it: --scale-enc-heads (our extension)
        norm = lambda kind=cfg.norm_type: Norm(kind, cfg.embed_dim, cfg.layernorm_impl)  # noqa: E731
        self.encoder_attn_layer_norm = norm(cfg.sublayer_norm_kind)
        # Our extension: LayerNorm on the encoder-attention output before the residual, as Post-Attn LN;
        # the sandwich norm's on this sublayer too.
        self.enc_attn_ln = norm() if cfg.scale_enc_attn or cfg.output_norms else nn.Identity()

    def forward(
        self,
        x,
        encoder_out: Optional[Tensor] = None,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        prev_self_attn_state=None,
        prev_attn_state=None,
        self_attn_mask=None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
    ):
        """fairseq's decoder-layer call. The causal mask comes from ``LayerConfig.causal`` (``self_attn_mask``
        is fairseq's copy of it); attention weights are not returned (no ``--print-alignment``)."""
        if encoder_out is None:
            raise ValueError("NormFormerCrossAttentionDecoderLayer needs the encoder output")
        x = self.self_attention_block(x, self_attn_padding_mask, incremental_state)
        x = self.encoder_attention_block(x, encoder_out, encoder_padding_mask, incremental_state)
        return self.feed_forward_block(x), None, None

    def encoder_attention_block(self, x: Tensor, encoder_out: Tensor, encoder_padding_mask, incremental_state):
        def attention(h):
            return self.enc_attn_ln(self.encoder_attn(h, encoder_out, encoder_padding_mask, incremental_state))

        return self._sublayer(x, self.encoder_attn_layer_norm, attention)

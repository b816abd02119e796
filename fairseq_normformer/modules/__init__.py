from .attention import EncoderAttention, SelfAttention
from .cross_attention_layer import NormFormerCrossAttentionDecoderLayer
from .layer_config import HEAD_SCALE_POSITIONS, LayerConfig
from .layer_norm import LAYERNORM_IMPLS, LayerNorm, resolve_layernorm_impl
from .normformer_layer import NormFormerDecoderLayer, NormFormerEncoderLayer, NormFormerLayer

__all__ = [
    "EncoderAttention",
    "HEAD_SCALE_POSITIONS",
    "LAYERNORM_IMPLS",
    "LayerConfig",
    "LayerNorm",
    "NormFormerCrossAttentionDecoderLayer",
    "NormFormerDecoderLayer",
    "NormFormerEncoderLayer",
    "NormFormerLayer",
    "SelfAttention",
    "resolve_layernorm_impl",
]

from .attention import SelfAttention
from .layer_config import HEAD_SCALE_POSITIONS, LayerConfig
from .layer_norm import LAYERNORM_IMPLS, LayerNorm, resolve_layernorm_impl
from .normformer_layer import NormFormerDecoderLayer, NormFormerEncoderLayer, NormFormerLayer

__all__ = [
    "HEAD_SCALE_POSITIONS",
    "LAYERNORM_IMPLS",
    "LayerConfig",
    "LayerNorm",
    "NormFormerDecoderLayer",
    "NormFormerEncoderLayer",
    "NormFormerLayer",
    "SelfAttention",
    "resolve_layernorm_impl",
]

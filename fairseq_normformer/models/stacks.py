"""The stack of layers every model family builds: normformer_lm's decoder, the masked LMs' encoders
(RoBERTa, BERT, LaMBERT) and normformer_transformer's encoder and decoder.

``LayerStack`` is the one place that reads the layer config (once per stack), builds layer i from its own
config (``LayerConfig.for_layer``: --normformer-layers and the other per-layer schemes), wraps it for
activation checkpointing and FSDP as fairseq wraps its layers, builds the stack's embedding and final norms
in the kind asked for (--norm-type; fairseq's base classes are built without theirs), and applies a scheme's
initialisation once the model's own is done (``init_schemes_``: DeepNorm's β, DyT's α₀ per position).
"""
import copy
import logging
from dataclasses import replace

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from torch import nn

from ..modules import LayerConfig, resolve_layernorm_impl
from ..modules.deepnorm import deepnorm_init_
from ..modules.layer_norm import Norm

logger = logging.getLogger(__name__)


def read_layer_config(args, side: str, causal: bool, encoder_decoder: bool = False) -> LayerConfig:
    """The layers' settings from a model's flat config: ``side`` "encoder" or "decoder"; Pre-LN unless --post-ln."""
    layernorm_impl = resolve_layernorm_impl(args.layernorm_impl)
    return LayerConfig.from_model_cfg(args, side, normalize_before=not args.post_ln, causal=causal,
                                      layernorm_impl=layernorm_impl, encoder_decoder=encoder_decoder)  # fmt: skip


def without_fairseq_norms(cfg, side: str):
    """fairseq's TransformerConfig without the embedding and final LayerNorm its base classes would build."""
    cfg = copy.copy(cfg)
    cfg.layernorm_embedding = False
    setattr(cfg, side, replace(getattr(cfg, side), normalize_before=False))
    return cfg


class LayerStack:
    """A mixin, first in a stack's bases. ``start_stack`` before the base class's ``__init__`` (fairseq's
    builds the layers through ``build_encoder_layer``/``build_decoder_layer``, which call ``build_layer``)."""

    def start_stack(self, layer_cfg: LayerConfig, layer_class: type, num_layers: int) -> None:
        self.layer_cfg, self.layer_class, self.num_layers = layer_cfg, layer_class, num_layers
        self.layers_built = 0
        logger.info(f"{type(self).__name__}: {num_layers} × {layer_class.__name__}, {layer_cfg}")

    def build_layer(self, fairseq_cfg=None) -> nn.Module:
        """The next layer from its own config; with ``fairseq_cfg`` wrapped for activation checkpointing
        and FSDP as fairseq wraps its own layers."""
        layer = self.layer_class(self.layer_cfg.for_layer(self.layers_built, self.num_layers))
        self.layers_built += 1
        if fairseq_cfg is None:
            return layer
        if fairseq_cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=fairseq_cfg.offload_activations)
        min_params = 0 if fairseq_cfg.checkpoint_activations else fairseq_cfg.min_params_to_wrap
        return fsdp_wrap(layer, min_num_params=min_params)

    def norm(self, dim: int = None) -> nn.Module:
        """A norm of the stack's kind (--norm-type) over ``dim`` features (default: the model dim)."""
        cfg = self.layer_cfg
        return Norm(cfg.norm_type, dim or cfg.embed_dim, cfg.layernorm_impl)

    def build_stack_norms(self, embedding: bool, final: bool) -> None:
        """``layernorm_embedding`` and ``layer_norm`` (fairseq's names), None where the model has none (ReZero's)."""
        normed = not self.layer_cfg.rezero  # ReZero: no norms
        self.layernorm_embedding = self.norm() if embedding and normed else None
        self.layer_norm = self.norm() if final and normed else None

    def init_scheme_(self) -> None:
        """A scheme's initialisation, applied on the model's own: DeepNorm's (W^V, W^O, FC1, FC2 × β) and DyT's
        α₀ per position (--dyt-alpha)."""
        if self.layer_cfg.deepnorm_beta is not None:
            deepnorm_init_(self.layers, self.layer_cfg.deepnorm_beta)
        if self.layer_cfg.dyt_alpha is not None:
            self.init_dyt_alpha_(*self.layer_cfg.dyt_alpha)

    @torch.no_grad()
    def init_dyt_alpha_(self, attn: float, ffn: float, final: float) -> None:
        """DyT (Zhu et al. 2025) with α₀ per position: the attention sublayers' norms (self- and encoder
        attention), the FFN sublayer's and the stack's final norm (their 7B LLaMA: 0.8, 0.2, 0.2)."""
        for layer in self.layers:
            for name, alpha in (("self_attn_layer_norm", attn), ("encoder_attn_layer_norm", attn),
                                ("final_layer_norm", ffn)):  # fmt: skip
                if hasattr(layer, name):
                    getattr(layer, name).alpha.fill_(alpha)
        if self.layer_norm is not None:
            self.layer_norm.alpha.fill_(final)


def init_schemes_(model: nn.Module) -> nn.Module:
    """Every stack's scheme initialisation, once: each family's build_model calls it last."""
    for module in model.modules():
        if isinstance(module, LayerStack):
            module.init_scheme_()
    return model

"""The NormFormer transformer layer (Shleifer, Weston, Ott 2021, Fig. 1).

Pre-LN (default) or Post-LN (Xiong et al. 2020) on one code path. Every NormFormer operation is
one module built in ``__init__`` and is ``nn.Identity``/``None`` when switched off, so with every
switch off this *is* the baseline layer. Parameter names follow fairseq's TransformerDecoderLayer.
"""
from typing import Callable, Optional

import torch
from fairseq import utils
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor, nn

from .attention import SelfAttention
from .compiled_ffn_norm import CompiledFC1ActivationNorm
from .layer_config import LayerConfig
from .layer_norm import ActivationLayerNorm, Norm


class NormFormerLayer(nn.Module):
    def __init__(self, cfg: LayerConfig):
        super().__init__()
        d, f = cfg.embed_dim, cfg.ffn_embed_dim
        self.normalize_before = cfg.normalize_before
        self.causal = cfg.causal
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=type(self).__name__)
        self.activation_dropout_module = FairseqDropout(cfg.activation_dropout, module_name=type(self).__name__)

        norm = lambda dim, kind=cfg.norm_type: Norm(kind, dim, cfg.layernorm_impl)  # noqa: E731  (--norm-type)
        self.self_attn = self.build_self_attention(cfg)  # HeadScale, QKV LN and QK-norm live inside it
        self.self_attn_layer_norm = norm(d, cfg.sublayer_norm_kind)
        # NormFormer "Post-Attn LN": LayerNorm on the self-attention output, before the residual.
        # It is also the attention half of the sandwich norm: x + N(f(N(x))) (CogView; Peri-LN).
        # OLMo 2's reordered norm is the sandwich norm without its input norms: x + N(f(x)).
        self.attn_ln = norm(d) if cfg.scale_attn or cfg.output_norms else nn.Identity()

        self.fc1 = self.build_fc1(d, f)
        self.activation_fn = utils.get_activation_fn(cfg.activation_fn)
        # NormFormer "FFN LN": LayerNorm after the FFN activation, before FC2 (its kind: --ffn-norm-type).
        self.ffn_layernorm = norm(f, cfg.ffn_norm_kind) if cfg.scale_fc else nn.Identity()
        # Activation + FFN LN as one function that reads ffn_layernorm's parameters and keeps only FC1's
        # output for backward (torch: recomputes the activation; triton: one kernel, one pass over memory).
        # It has no dropout, so only when activation dropout is 0; with apex the two run unfused.
        compiled = cfg.scale_fc and cfg.ffn_norm_impl == "compile"
        fusable = cfg.scale_fc and cfg.ffn_norm_kind == "layernorm" and cfg.activation_dropout == 0.0 and not compiled
        self.ffn_act_norm = ActivationLayerNorm(cfg.activation_fn, cfg.layernorm_impl) if fusable else None
        # --ffn-norm-impl compile: FC1, the activation and the FFN LN as one torch.compile'd op (the paper's
        # closing suggestion: "fusing the FFN LN with the preceding fully connected layer").
        self.fc1_act_norm = CompiledFC1ActivationNorm(cfg.activation_fn, cfg.ffn_norm_kind) if compiled else None
        self.fc2 = self.build_fc2(f, d)
        # The sandwich norm's FFN half: a norm on the FFN output, before the residual add.
        self.ffn_out_ln = norm(d) if cfg.output_norms else nn.Identity()
        # ResScale: λ_resid ⊙ x on the FFN residual (as the authors' fairseq code; §2 of the paper).
        self.w_resid = nn.Parameter(torch.ones(d)) if cfg.scale_resids else None
        self.final_layer_norm = norm(d, cfg.sublayer_norm_kind)
        self.deepnorm_alpha = cfg.deepnorm_alpha  # DeepNorm: LN(α x + f(x)) (Wang et al. 2022); None: α = 1
        self.ln_scale = cfg.layer_number**-0.5 if cfg.ln_scaling else None  # LayerNorm Scaling: pre_norm
        self.rezero_alpha = nn.Parameter(torch.zeros(1)) if cfg.rezero else None  # ReZero's α, init 0: _sublayer

    # -- override hooks, as fairseq's TransformerDecoderLayerBase --
    def build_self_attention(self, cfg: LayerConfig) -> nn.Module:
        return SelfAttention(cfg)

    def build_fc1(self, input_dim: int, output_dim: int) -> nn.Module:
        return nn.Linear(input_dim, output_dim)

    def build_fc2(self, input_dim: int, output_dim: int) -> nn.Module:
        return nn.Linear(input_dim, output_dim)

    def residual_connection(self, x: Tensor, residual: Tensor) -> Tensor:
        return residual + x

    # -- forward --
    def forward(self, x: Tensor, padding_mask: Optional[Tensor] = None, incremental_state=None) -> Tensor:
        """x: (T, B, C); padding_mask: (B, T), True at padding."""
        return self.feed_forward_block(self.self_attention_block(x, padding_mask, incremental_state))

    def self_attention_block(self, x: Tensor, padding_mask: Optional[Tensor], incremental_state) -> Tensor:
        def attention(h):
            h = self.self_attn(h, padding_mask, self.causal, incremental_state)
            return self.attn_ln(h)

        return self._sublayer(x, self.self_attn_layer_norm, attention)

    def feed_forward_block(self, x: Tensor) -> Tensor:
        return self._sublayer(x, self.final_layer_norm, self.feed_forward, self.w_resid)

    def feed_forward(self, x: Tensor) -> Tensor:
        return self.ffn_out_ln(self.fc2(self.fc1_activation_norm(x)))

    def fc1_activation_norm(self, x: Tensor) -> Tensor:
        """FC1, the activation, its dropout and the FFN LN: one compiled op with --ffn-norm-impl compile."""
        if self.fc1_act_norm is not None:
            return self.fc1_act_norm(x, self.fc1, self.ffn_layernorm)
        return self.activation_norm(self.fc1(x))

    def activation_norm(self, x: Tensor) -> Tensor:
        """FC1's output (T, B, F) through the activation, its dropout and the FFN LN."""
        if self.ffn_act_norm is not None:
            return self.ffn_act_norm(x, self.ffn_layernorm)
        return self.ffn_layernorm(self.activation_dropout_module(self.activation_fn(x)))

    def _sublayer(self, x: Tensor, norm: nn.Module, fn: Callable, residual_scale: Optional[Tensor] = None):
        """Pre-LN: x + f(LN(x)).  Post-LN: LN(x + f(x)).  ResScale multiplies the residual x, DeepNorm's α too."""
        residual = x if residual_scale is None else residual_scale * x
        if self.deepnorm_alpha is not None:
            residual = self.deepnorm_alpha * residual
        h = fn(self.pre_norm(norm, x) if self.normalize_before else x)
        if self.rezero_alpha is not None:  # ReZero (Bachlechner et al. 2021): x + α f(x), its norms Identity
            h = self.rezero_alpha * h
        x = self.residual_connection(self.dropout_module(h), residual)
        return x if self.normalize_before else norm(x)

    def pre_norm(self, norm: nn.Module, x: Tensor) -> Tensor:
        """A Pre-LN sublayer's input norm. LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth"):
        LN(x) / sqrt(ℓ), ℓ the layer's 1-based index in its stack."""
        return norm(x) if self.ln_scale is None else norm(x) * self.ln_scale


class NormFormerDecoderLayer(NormFormerLayer):
    """NormFormerLayer with the call signature of fairseq's decoder layers (no encoder attention).

    The causal mask comes from ``LayerConfig.causal`` (SDPA's is_causal), so fairseq's additive
    ``self_attn_mask`` is not needed; attention weights are not returned.
    """

    def forward(
        self,
        x,
        encoder_out=None,
        encoder_padding_mask=None,
        incremental_state=None,
        prev_self_attn_state=None,
        prev_attn_state=None,
        self_attn_mask=None,
        self_attn_padding_mask=None,
        need_attn=False,
        need_head_weights=False,
    ):
        if encoder_out is not None:
            raise ValueError("NormFormerDecoderLayer is decoder-only: it has no encoder attention")
        return super().forward(x, self_attn_padding_mask, incremental_state), None, None


class NormFormerEncoderLayer(NormFormerLayer):
    """NormFormerLayer with the call signature of fairseq's encoder layers, for
    TransformerEncoderBase (RoBERTa/BERT). Build it with ``LayerConfig(causal=False)``."""

    def forward(self, x, encoder_padding_mask=None, attn_mask=None):
        if attn_mask is not None:
            raise ValueError("NormFormerEncoderLayer takes no attn_mask: it masks padding only")
        return super().forward(x, encoder_padding_mask)

    def upgrade_state_dict_named(self, state_dict, name):
        """Called by TransformerEncoderBase; parameter names need no upgrade."""

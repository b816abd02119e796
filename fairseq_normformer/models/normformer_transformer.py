"""``normformer_transformer``: encoder-decoders for fairseq's ``translation`` task built from NormFormer layers.

fairseq's TransformerModel (embeddings, shared/tied embeddings, positions, encoder-output reordering for
beam search) with ``build_encoder``/``build_decoder`` returning the NormFormer encoder of the masked LMs
(non-causal layers) and the NormFormer decoder of the LM with encoder attention in every layer
(modules/cross_attention_layer.py). Encoder and decoder read the same switches; Pre-LN or Post-LN is
``--post-ln`` (fairseq's ``--encoder-normalize-before``/``--decoder-normalize-before`` are accepted as its
inverse). With every switch off this is fairseq's ``transformer`` with the same parameter names.
"""
import argparse

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer import base_architecture as transformer_base_architecture
from fairseq.models.transformer import (
    transformer_iwslt_de_en,
    transformer_wmt_en_de,
    transformer_wmt_en_de_big,
)
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from .normformer_lm import NormFormerDecoder, normformer_operations
from .normformer_roberta import NormFormerSentenceEncoder, layer_norm_placement
from .options import EncoderAttentionSwitches, NormFormerOptions, add_normformer_args, fill_option_defaults
from .stacks import init_schemes_

UNSUPPORTED = {  # fairseq transformer options our layers do not implement
    "no_cross_attention": "--no-cross-attention",
    "cross_self_attention": "--cross-self-attention",
}


@register_model("normformer_transformer")
class NormFormerTransformerModel(TransformerModel):
    @classmethod
    def add_args(cls, parser):
        TransformerModel.add_args(parser)
        add_normformer_args(parser)
        add_normformer_args(parser, EncoderAttentionSwitches)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            # A checkpoint's config: TransformerConfig.from_namespace keeps the keys it does not declare
            # (the NormFormer switches) only from a Namespace.
            args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True, enum_to_str=True))
        base_architecture(args)
        check_supported(args)
        return init_schemes_(super().build_model(args, task))

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return NormFormerSentenceEncoder(cfg, src_dict, embed_tokens, encoder_decoder=True)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return NormFormerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=False)


def check_supported(args):
    for name, flag in UNSUPPORTED.items():
        if safe_getattr(args, name, False):
            raise ValueError(f"normformer_transformer does not support {flag}")
    if args.encoder_embed_dim != args.decoder_embed_dim:
        raise ValueError(
            f"normformer_transformer's encoder attention needs --encoder-embed-dim ({args.encoder_embed_dim}) "
            f"equal to --decoder-embed-dim ({args.decoder_embed_dim})"
        )


# ---------------------------------------------------------------------------------------------
# Presets. Each fills only the values the user did not set (safe_getattr), then calls the base.
# `--arch normformer_transformer` is fairseq's `transformer` (Post-LN); `postln_transformer_*` and
# `preln_transformer_*` are Xiong et al.'s two baselines at fairseq's sizes, `normformer_transformer_*`
# the Pre-LN one with the paper's three operations in encoder and decoder layers.
# ---------------------------------------------------------------------------------------------
def layer_norm_sides(args, post_ln: bool):
    layer_norm_placement(args, post_ln, sides=("encoder", "decoder"))


@register_model_architecture("normformer_transformer", "normformer_transformer")
def base_architecture(args):
    layer_norm_sides(args, post_ln=True)  # fairseq's transformer is Post-LN
    fill_option_defaults(args, NormFormerOptions)
    fill_option_defaults(args, EncoderAttentionSwitches)
    transformer_base_architecture(args)


def _register_presets(name, fairseq_size):
    """``fairseq_size``: fairseq's architecture function for ``transformer_{name}`` (sizes, dropout)."""

    @register_model_architecture("normformer_transformer", f"postln_transformer_{name}")
    def postln(args):
        layer_norm_sides(args, post_ln=True)
        fairseq_size(args)
        base_architecture(args)

    @register_model_architecture("normformer_transformer", f"preln_transformer_{name}")
    def preln(args):
        layer_norm_sides(args, post_ln=False)
        fairseq_size(args)
        base_architecture(args)

    @register_model_architecture("normformer_transformer", f"normformer_transformer_{name}")
    def normformer(args):
        normformer_operations(args)
        preln(args)


_register_presets("iwslt_de_en", transformer_iwslt_de_en)  # 6+6 layers, 512, FFN 1024, 4 heads (Xiong et al.)
_register_presets("wmt_en_de", transformer_wmt_en_de)  # base: 6+6, 512, FFN 2048, 8 heads
_register_presets("wmt_en_de_big", transformer_wmt_en_de_big)  # big: 6+6, 1024, FFN 4096, 16 heads, dropout 0.3

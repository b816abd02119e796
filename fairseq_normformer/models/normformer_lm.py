"""``normformer_lm``: a fairseq causal language model built from NormFormer layers.

The decoder is fairseq's TransformerDecoderBase (embeddings, positions, adaptive softmax,
incremental decoding) with its layers and norms built by the shared stack (models/stacks.py). The switches are read
from the model's own config, not from TransformerConfig, which drops keys it does not declare
(the reason fairseq's built-in flags are lost on the ``fairseq-train`` path).
"""
from dataclasses import dataclass, field

from fairseq import hub_utils, options
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from fairseq.models.transformer_lm import (
    DEFAULT_MAX_TARGET_POSITIONS,
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_gpt3_architecture,
    base_lm_architecture,
    transformer_lm_baevski_wiki103,
)
from fairseq.modules import AdaptiveInput
from fairseq.utils import safe_getattr
from omegaconf import II

from ..memory_plan import GPT3_SIZES
from ..modules import NormFormerCrossAttentionDecoderLayer, NormFormerDecoderLayer
from ..modules.layer_config import ACTIVATIONS
from ..modules.operations import OPERATIONS
from ..modules.positions import count_positions_per_row
from .hub_interface import load
from .options import NormFormerOptions
from .stacks import LayerStack, init_schemes_, read_layer_config, without_fairseq_norms


@dataclass
class NormFormerLanguageModelConfig(NormFormerOptions, TransformerLanguageModelConfig):
    """NormFormerOptions first: its --scale-* fields and help replace fairseq's declarations."""

    activation_fn: ChoiceEnum(ACTIVATIONS) = field(default="relu", metadata={"help": "activation function to use"})
    # fairseq's defaults are 512 whatever --decoder-embed-dim says; follow the embedding dim instead.
    decoder_input_dim: int = II("model.decoder_embed_dim")
    decoder_output_dim: int = II("model.decoder_embed_dim")


class NormFormerDecoder(LayerStack, TransformerDecoderBase):
    """The LM's decoder, and with ``no_encoder_attn=False`` an encoder-decoder's (normformer_transformer)."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True):
        layer_cfg = read_layer_config(args, "decoder", causal=True, encoder_decoder=not no_encoder_attn)
        layer_class = NormFormerDecoderLayer if no_encoder_attn else NormFormerCrossAttentionDecoderLayer
        self.start_stack(layer_cfg, layer_class, args.decoder_layers)
        cfg = TransformerConfig.from_namespace(args)
        cfg.decoder.normalize_before = layer_cfg.normalize_before  # --post-ln, not fairseq's flag
        super().__init__(without_fairseq_norms(cfg, "decoder"), dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.cfg = cfg
        self.build_stack_norms(cfg.layernorm_embedding, layer_cfg.normalize_before and not cfg.no_decoder_final_norm)
        if self.embed_positions is not None:  # left-padded prompts: see modules/positions.py
            count_positions_per_row(self.embed_positions)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        """fairseq calls it once per layer, in order."""
        return self.build_layer(cfg)


@register_model("normformer_lm", dataclass=NormFormerLanguageModelConfig)
class NormFormerLanguageModel(TransformerLanguageModel):
    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """fairseq's GeneratorHubInterface (sample, score), logging one line for the whole config
        (models/hub_interface.py's load)."""
        x = load(cls, model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)
        return hub_utils.GeneratorHubInterface(x["args"], x["task"], x["models"])

    @classmethod
    def build_model(cls, args, task):
        if args.character_embeddings:
            raise ValueError("normformer_lm does not support --character-embeddings")
        if safe_getattr(args, "max_target_positions", None) is None:
            args.max_target_positions = safe_getattr(args, "tokens_per_sample", DEFAULT_MAX_TARGET_POSITIONS)
        decoder = NormFormerDecoder(args, task.target_dictionary, cls.build_input_embedding(args, task))
        return init_schemes_(cls(decoder))

    @classmethod
    def build_input_embedding(cls, args, task):
        if not args.adaptive_input:
            return cls.build_embedding(args, task.source_dictionary, args.decoder_input_dim)
        if args.tie_adaptive_weights and args.adaptive_softmax_cutoff != args.adaptive_input_cutoff:
            raise ValueError(
                "--tie-adaptive-weights needs --adaptive-softmax-cutoff == --adaptive-input-cutoff, got "
                f"{args.adaptive_softmax_cutoff!r} and {args.adaptive_input_cutoff!r}"
            )
        return AdaptiveInput(
            len(task.source_dictionary),
            task.source_dictionary.pad(),
            args.decoder_input_dim,
            args.adaptive_input_factor,
            args.decoder_embed_dim,
            options.eval_str_list(args.adaptive_input_cutoff, type=int),
            args.quant_noise_pq,
            args.quant_noise_pq_block_size,
        )


# ---------------------------------------------------------------------------------------------
# Presets. Each fills only the values the user did not set (safe_getattr), then calls the base.
# `preln_lm_*` are the Pre-LN baselines; `normformer_lm_*` the same sizes with the paper's three
# operations; every row of Tables 5-7 is one of these names plus flags.
# ---------------------------------------------------------------------------------------------
def base_architecture(args):
    """Called last by every preset. (``--arch normformer_lm`` itself uses the dataclass defaults.)"""
    base_lm_architecture(args)


def normformer_operations(args):
    """The paper's NormFormer: Post-Attn LN, FFN LN and HeadScale (Fig. 1; the table's in_normformer rows)."""
    for op in OPERATIONS:
        if op.in_normformer:
            setattr(args, op.field, safe_getattr(args, op.field, True))


def gpt3_architecture(args, layers, embed_dim, heads):
    args.decoder_layers = safe_getattr(args, "decoder_layers", layers)
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", embed_dim)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", heads)
    # Sinusoidal positions, as the paper (after Shortformer); --decoder-learned-pos for learned ones.
    args.decoder_learned_pos = safe_getattr(args, "decoder_learned_pos", False)
    base_gpt3_architecture(args)  # GELU, FFN 4d, tied input/output embeddings
    base_architecture(args)


def _register_gpt3_presets(size, layers, embed_dim, heads):
    @register_model_architecture("normformer_lm", f"preln_lm_{size}")
    def preln(args):
        gpt3_architecture(args, layers, embed_dim, heads)

    @register_model_architecture("normformer_lm", f"normformer_lm_{size}")
    def normformer(args):
        normformer_operations(args)
        gpt3_architecture(args, layers, embed_dim, heads)


for _size, _shape in GPT3_SIZES.items():
    _register_gpt3_presets(_size, *_shape)


@register_model_architecture("normformer_lm", "preln_lm_wiki103")
def preln_lm_wiki103(args):
    """Baevski & Auli (2019): adaptive input and softmax, 16 layers, 1024 dim (Table 8)."""
    transformer_lm_baevski_wiki103(args)
    base_architecture(args)


@register_model_architecture("normformer_lm", "normformer_lm_wiki103")
def normformer_lm_wiki103(args):
    normformer_operations(args)
    preln_lm_wiki103(args)

"""``normformer_roberta``: RoBERTa-style masked LMs built from NormFormer layers (paper, Table 2).

fairseq's RobertaModel and RobertaEncoder (token embeddings, learned positions, LM head tied to the
embeddings, classification heads for ``sentence_prediction``, token heads for the tasks of
docs/finetuning.md) with the sentence encoder's layers and norms built by the shared stack (models/stacks.py),
so fairseq's own ``masked_lm`` task and criterion train it.
Pre-/Post-LN is ``--post-ln`` as on the LM (fairseq's ``--encoder-normalize-before`` is accepted as
its inverse); the NormFormer switches are read from the model's own args (never through
TransformerConfig, which drops keys it does not declare).
"""
import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import RobertaEncoder, RobertaModel
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr, safe_hasattr
from omegaconf import OmegaConf
from torch import nn

from ..checks import BadInput
from ..modules import NormFormerEncoderLayer
from ..modules.layer_norm import Norm
from .hub_interface import NormFormerRobertaHubInterface, load
from .normformer_lm import normformer_operations
from .options import add_normformer_args, fill_option_defaults
from .stacks import LayerStack, init_schemes_, read_layer_config, without_fairseq_norms
from .token_heads import TokenHeadsMixin

class NormFormerSentenceEncoder(LayerStack, TransformerEncoderBase):
    """fairseq's TransformerEncoderBase (embeddings, positions) with the shared stack's layers and norms."""

    def __init__(self, args, dictionary, embed_tokens, encoder_decoder=False):
        layer_cfg = read_layer_config(args, "encoder", causal=False, encoder_decoder=encoder_decoder)
        self.start_stack(layer_cfg, NormFormerEncoderLayer, args.encoder_layers)
        cfg = TransformerConfig.from_namespace(args)
        super().__init__(without_fairseq_norms(cfg, "encoder"), dictionary, embed_tokens)
        self.cfg = cfg
        self.build_stack_norms(cfg.layernorm_embedding, layer_cfg.normalize_before)

    def build_encoder_layer(self, cfg):
        """fairseq calls it once per layer, in order."""
        return self.build_layer(cfg)


class LMHead(nn.Module):
    """fairseq's RobertaLMHead (dense, activation, norm, the output projection tied to the embeddings), its
    norm of the model's kind (--norm-type)."""

    def __init__(self, embed_dim: int, output_dim: int, activation_fn: str, weight, norm: nn.Module):
        super().__init__()
        self.dense = nn.Linear(embed_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.layer_norm = norm
        self.weight = nn.Linear(embed_dim, output_dim, bias=False).weight if weight is None else weight
        self.bias = nn.Parameter(torch.zeros(output_dim))

    def forward(self, features, masked_tokens=None, **kwargs):
        """(B, T, C) -> (B, T, V), or (M, V) at the ``masked_tokens`` only."""
        if masked_tokens is not None:
            features = features[masked_tokens, :]
        x = self.layer_norm(self.activation_fn(self.dense(features)))
        return F.linear(x, self.weight) + self.bias


class NormFormerRobertaEncoder(RobertaEncoder):
    sentence_encoder_class = NormFormerSentenceEncoder

    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = self.sentence_encoder_class(args, dictionary, embed_tokens)
        encoder.apply(init_bert_params)
        return encoder

    def build_lm_head(self, embed_dim, output_dim, activation_fn, weight):
        norm = Norm(self.sentence_encoder.layer_cfg.stack_norm_kind, embed_dim)
        return LMHead(embed_dim, output_dim, activation_fn, weight, norm)


@register_model("normformer_roberta")
class NormFormerRobertaModel(TokenHeadsMixin, RobertaModel):
    encoder_class = NormFormerRobertaEncoder
    hub_interface_class = NormFormerRobertaHubInterface

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        add_normformer_args(parser)
        parser.add_argument("--no-layernorm-embedding", dest="layernorm_embedding", action="store_false",
                            help="no LayerNorm on the embeddings, where the preset has one (the BERT presets)")

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".",
                        bpe="sentencepiece", **kwargs):  # fmt: skip
        """fairseq's, returning this package's hub interface (models/hub_interface.py: fill_mask fixed,
        BERT's input layout, one log line); the BPE defaults to SentencePiece: pass ``sentencepiece_model=".../spm.model"``."""
        x = load(cls, model_name_or_path, checkpoint_file, data_name_or_path, bpe=bpe, load_checkpoint_heads=True,
                 **kwargs)  # fmt: skip
        model = x["models"][0]  # the checkpoint's class: normformer_bert and lambert get BERT's interface
        return model.hub_interface_class(x["args"], x["task"], model)

    def upgrade_state_dict_named(self, state_dict, name):
        self.check_checkpoint_weights(state_dict, name + "." if name else "")
        super().upgrade_state_dict_named(state_dict, name)

    def check_checkpoint_weights(self, state_dict, prefix=""):
        """A checkpoint with an embedding LayerNorm where this model has none, or the other way round
        (a checkpoint of a BERT preset from before they kept BERT's), is named with the flag to pass.
        fixes/optimizer_state.py calls it too, before it maps a resumed run's Adam state by parameter name."""
        encoder = f"{prefix}encoder.sentence_encoder."
        if not hasattr(self.encoder.sentence_encoder, "layernorm_embedding"):
            return  # LaMBERT's encoder (models/lambert.py) has its own
        ours = self.encoder.sentence_encoder.layernorm_embedding is not None
        theirs = f"{encoder}layernorm_embedding.weight" in state_dict
        if ours == theirs or not any(k.startswith(encoder) for k in state_dict):
            return
        if theirs:
            raise BadInput("the checkpoint has a LayerNorm on the embeddings, this model none: pass --layernorm-embedding")
        raise BadInput("the checkpoint has no LayerNorm on the embeddings, this model one (the BERT presets keep "
                       "BERT's): pass --no-layernorm-embedding")

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, False)
        base_architecture(args)
        if not safe_hasattr(args, "max_positions"):
            args.max_positions = safe_getattr(args, "tokens_per_sample", None) or task.max_positions()
        encoder = cls.encoder_class(args, task.source_dictionary)
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, True)
        return init_schemes_(cls(args, encoder))  # after RobertaModel's init_bert_params


# ---------------------------------------------------------------------------------------------
# Presets. Each fills only the values the user did not set (safe_getattr), then calls the base.
# `--arch normformer_roberta` is fairseq's roberta_base (Post-LN); `preln_roberta_*` are the
# paper's Pre-LN baselines and `normformer_roberta_*` the same with the NormFormer operations.
# ---------------------------------------------------------------------------------------------
def layer_norm_placement(args, post_ln: bool, sides=("encoder",)):
    """Fill ``--post-ln`` (``post_ln`` if unset) and fairseq's ``--{side}-normalize-before`` of each side, its
    inverse, which fairseq's encoder and decoder read (final LayerNorm) and users may pass instead."""
    ours = safe_getattr(args, "post_ln")
    for side in sides:
        theirs = safe_getattr(args, f"{side}_normalize_before")
        if ours is not None and theirs is not None and ours == theirs:
            raise ValueError(
                f"--post-ln is {ours} but --{side}-normalize-before (its inverse: Pre-LN) is {theirs}; "
                "pass one of them"
            )
        if ours is None and theirs is not None:
            ours = not theirs
    ours = post_ln if ours is None else ours
    args.post_ln = ours
    for side in sides:
        setattr(args, f"{side}_normalize_before", not ours)


@register_model_architecture("normformer_roberta", "normformer_roberta")
def base_architecture(args):
    layer_norm_placement(args, post_ln=True)  # fairseq's roberta_base is Post-LN
    fill_option_defaults(args)
    roberta_base_architecture(args)  # 12 layers, 768, 12 heads, FFN 3072, learned positions, GELU


def preln_architecture(args):
    """Pre-LN as fairseq's roberta_prenorm: no LayerNorm on the embeddings, a final one instead."""
    layer_norm_placement(args, post_ln=False)
    args.layernorm_embedding = safe_getattr(args, "layernorm_embedding", False)


def large_size(args):
    args.encoder_layers = safe_getattr(args, "encoder_layers", 24)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 1024)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 4096)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 16)


@register_model_architecture("normformer_roberta", "preln_roberta_base")
def preln_roberta_base(args):
    preln_architecture(args)
    base_architecture(args)


@register_model_architecture("normformer_roberta", "normformer_roberta_base")
def normformer_roberta_base(args):
    normformer_operations(args)
    preln_roberta_base(args)


@register_model_architecture("normformer_roberta", "preln_roberta_large")
def preln_roberta_large(args):
    large_size(args)
    preln_roberta_base(args)


@register_model_architecture("normformer_roberta", "normformer_roberta_large")
def normformer_roberta_large(args):
    normformer_operations(args)
    preln_roberta_large(args)

"""``normformer_bert``: BERT (Devlin et al. 2019) built from NormFormer layers, for MLM + NSP.

``normformer_roberta`` plus BERT's segment (sentence A/B) embeddings, a [CLS] pooler (dense + tanh)
and a two-way next-sentence head (none with the mlm_nsp task's ``--no-nsp``), and with the mlm_nsp
criterion's ``--sbo-loss-weight`` > 0 SpanBERT's span boundary head. (Both options reach the model
through the command line's namespace, which fairseq gives legacy models whole and saves in the
checkpoint.) Symbols: [CLS] is the dictionary's ``<s>``, [SEP] its ``</s>``
(the end-of-line symbol fairseq-preprocess appends), so the ``sentence_prediction`` layout
``<s> A </s> B </s>`` is BERT's ``[CLS] A [SEP] B [SEP]``. Segments are read off the tokens.
"""
import logging

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.modules import LayerNorm
from fairseq.utils import safe_getattr
from torch import Tensor, nn

from ..data.nsp_pairs import NUM_SEGMENTS, segment_ids
from .hub_interface import NormFormerBertHubInterface
from .normformer_lm import normformer_operations
from .normformer_roberta import (
    NormFormerRobertaEncoder,
    NormFormerRobertaModel,
    NormFormerSentenceEncoder,
    base_architecture,
    large_size,
    layer_norm_placement,
    preln_architecture,
)

logger = logging.getLogger(__name__)

class SegmentedSentenceEncoder(NormFormerSentenceEncoder):
    """Adds the segment embedding to each token embedding (before fairseq's embed_scale, which the
    BERT presets leave at 1, and before the positions and the embedding LayerNorm)."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens)
        self.sep = dictionary.eos()
        self.embed_segments = nn.Embedding(NUM_SEGMENTS, embed_tokens.embedding_dim)

    def forward_embedding(self, src_tokens, token_embedding=None):
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)  # (B, T, C)
        token_embedding = token_embedding + self.embed_segments(segment_ids(src_tokens, self.sep))
        return super().forward_embedding(src_tokens, token_embedding)


class CLSPooler(nn.Module):
    """BERT's pooler: a dense layer and tanh on the hidden state of [CLS], the first position."""

    def __init__(self, embed_dim: int, activation_fn: str):
        super().__init__()
        self.dense = nn.Linear(embed_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)

    def forward(self, features: Tensor) -> Tensor:  # (B, T, C) -> (B, C)
        return self.activation_fn(self.dense(features[:, 0]))


class SpanBoundaryHead(nn.Module):
    """SpanBERT's span boundary objective (Joshi et al. 2020, §3.2; Jurafsky & Martin eq. 11.17-11.20):
    token i of a span s..e is predicted from the encoder outputs of the tokens around the span and a
    relative position embedding, h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}], through a 2-layer FFN with GeLU
    and LayerNorm, h = LN(GeLU(W2 LN(GeLU(W1 h0)))), and the output embedding (tied to the input
    embedding, as the MLM head) plus a bias."""

    def __init__(self, embed_dim: int, max_span: int, output_weight: nn.Parameter):
        super().__init__()
        self.positions = nn.Embedding(max_span, embed_dim)  # p_1 .. p_max_span
        self.fc1, self.norm1 = nn.Linear(3 * embed_dim, embed_dim), LayerNorm(embed_dim)
        self.fc2, self.norm2 = nn.Linear(embed_dim, embed_dim), LayerNorm(embed_dim)
        self.weight = output_weight
        self.bias = nn.Parameter(torch.zeros(output_weight.size(0)))

    def forward(self, features: Tensor, masked_tokens: Tensor, span_boundaries: Tensor) -> Tensor:
        """features (B, T, C), masked_tokens (B, T) bool, span_boundaries (B, T, 2) positions of
        x_{s-1}, x_{e+1} -> (M, V) logits of the masked tokens, row-major as the MLM head's."""
        rows, cols = masked_tokens.nonzero(as_tuple=True)
        before, after = span_boundaries[rows, cols].unbind(dim=-1)
        h = torch.cat([features[rows, before], features[rows, after], self.positions(cols - before - 1)], dim=-1)
        h = self.norm1(F.gelu(self.fc1(h)))
        h = self.norm2(F.gelu(self.fc2(h)))
        return F.linear(h, self.weight) + self.bias


class NormFormerBertEncoder(NormFormerRobertaEncoder):
    sentence_encoder_class = SegmentedSentenceEncoder

    def __init__(self, args, dictionary):
        super().__init__(args, dictionary)
        self.pooler = self.nsp_head = self.sbo_head = None
        if not safe_getattr(args, "no_nsp", False):
            self.pooler = CLSPooler(args.encoder_embed_dim, args.pooler_activation_fn)
            self.nsp_head = nn.Linear(args.encoder_embed_dim, 2)  # logits of IS_NEXT, NOT_NEXT
        if safe_getattr(args, "sbo_loss_weight", 0.0) > 0:
            self.sbo_head = SpanBoundaryHead(args.encoder_embed_dim, args.max_positions, self.lm_head.weight)

    def forward(
        self, src_tokens, features_only=False, return_all_hiddens=False, masked_tokens=None, span_boundaries=None,
        **unused,
    ):  # fmt: skip
        """As RobertaEncoder; unless features_only, ``extra["nsp_logits"]`` (B, 2) holds the NSP logits
        (with an NSP head) and, given span_boundaries (with an SBO head), ``extra["sbo_logits"]`` (M, V)."""
        x, extra = self.extract_features(src_tokens, return_all_hiddens=return_all_hiddens)  # (B, T, C)
        if not features_only:
            if self.nsp_head is not None:
                extra["nsp_logits"] = self.nsp_head(self.pooler(x))
            if self.sbo_head is not None and span_boundaries is not None:
                extra["sbo_logits"] = self.sbo_head(x, masked_tokens, span_boundaries)
            x = self.output_layer(x, masked_tokens=masked_tokens)  # (B, T, V) or (M, V)
        return x, extra


@register_model("normformer_bert")
class NormFormerBertModel(NormFormerRobertaModel):
    encoder_class = NormFormerBertEncoder
    hub_interface_class = NormFormerBertHubInterface

    def upgrade_state_dict_named(self, state_dict, name):
        prefix = name + "." if name != "" else ""
        self.match_pretraining_heads(state_dict, prefix)
        self.init_classification_heads_from_pooler(state_dict, prefix)
        super().upgrade_state_dict_named(state_dict, name)

    def match_pretraining_heads(self, state_dict, prefix):
        """The pooler/NSP and SBO heads depend on pre-training options (--no-nsp, --sbo-loss-weight)
        that a fine-tuning command line does not repeat: heads this model lacks are dropped from the
        checkpoint, heads the checkpoint lacks keep this model's initialisation (the SBO head's
        output weight stays tied to the checkpoint's embeddings)."""
        for head_name in ("pooler", "nsp_head", "sbo_head"):
            head, head_prefix = getattr(self.encoder, head_name), f"{prefix}encoder.{head_name}."
            saved = [k for k in state_dict if k.startswith(head_prefix)]
            if head is None and saved:
                logger.info(f"{head_name}: in the checkpoint, not in this model; dropped")
                for k in saved:
                    del state_dict[k]
            elif head is not None and not saved:
                logger.info(f"{head_name}: not in the checkpoint; newly initialised")
                state_dict.update({head_prefix + k: v.clone() for k, v in head.state_dict().items()})
                if head_name == "sbo_head":
                    state_dict[head_prefix + "weight"] = state_dict[f"{prefix}encoder.lm_head.weight"]

    def init_classification_heads_from_pooler(self, state_dict, prefix):
        """A classification head that the checkpoint lacks (fine-tuning a pre-trained model) starts
        with its dense layer copied from the pre-trained [CLS] pooler, as in BERT's fine-tuning."""
        pooler = {p: state_dict.get(f"{prefix}encoder.pooler.dense.{p}") for p in ("weight", "bias")}
        for head_name, head in getattr(self, "classification_heads", {}).items():
            head_prefix = f"{prefix}classification_heads.{head_name}."
            if pooler["weight"] is None or any(k.startswith(head_prefix) for k in state_dict):
                continue
            if head.dense.weight.shape != pooler["weight"].shape:
                continue  # a head with another --inner-dim keeps its random initialisation
            head_state = {k: v.clone() for k, v in head.state_dict().items()}
            head_state.update({f"dense.{p}": tensor.clone() for p, tensor in pooler.items()})
            state_dict.update({head_prefix + k: v for k, v in head_state.items()})
            logger.info(f"classification head {head_name!r}: dense layer initialised from the pre-trained pooler")


# ---------------------------------------------------------------------------------------------
# Presets. `postln_bert_*` are BERT as published (Post-LN, LayerNorm on the embeddings; fairseq's
# legacy masked_lm model already owns the names bert_base/bert_large); `preln_bert_*` the Pre-LN
# baselines (also with BERT's embedding LayerNorm; --no-layernorm-embedding drops it) and
# `normformer_bert_*` those with the NormFormer operations.
# ---------------------------------------------------------------------------------------------
@register_model_architecture("normformer_bert", "normformer_bert")
def bert_base_architecture(args):
    base_architecture(args)  # BERT-base: 12 layers, 768, 12 heads, FFN 3072, GELU, dropout 0.1, 512 positions


@register_model_architecture("normformer_bert", "postln_bert_base")
def postln_bert_base(args):
    layer_norm_placement(args, post_ln=True)
    args.layernorm_embedding = safe_getattr(args, "layernorm_embedding", True)
    bert_base_architecture(args)


@register_model_architecture("normformer_bert", "postln_bert_large")
def postln_bert_large(args):
    large_size(args)
    postln_bert_base(args)


@register_model_architecture("normformer_bert", "preln_bert_base")
def preln_bert_base(args):
    # BERT's LayerNorm on the embeddings (roberta_prenorm drops it): without it, BERT's init (std 0.02)
    # leaves the tokens a few % of NormFormer's residual stream (docs/results/small/mlm, "The embedding LayerNorm")
    args.layernorm_embedding = safe_getattr(args, "layernorm_embedding", True)
    preln_architecture(args)
    bert_base_architecture(args)


@register_model_architecture("normformer_bert", "normformer_bert_base")
def normformer_bert_base(args):
    normformer_operations(args)
    preln_bert_base(args)


@register_model_architecture("normformer_bert", "preln_bert_large")
def preln_bert_large(args):
    large_size(args)
    preln_bert_base(args)


@register_model_architecture("normformer_bert", "normformer_bert_large")
def normformer_bert_large(args):
    normformer_operations(args)
    preln_bert_large(args)

"""``normformer_bert``: BERT (Devlin et al. 2019) built from NormFormer layers, for MLM + NSP.

``normformer_roberta`` plus BERT's segment (sentence A/B) embeddings, a [CLS] pooler (dense + tanh)
and a two-way next-sentence head. Symbols: [CLS] is the dictionary's ``<s>``, [SEP] its ``</s>``
(the end-of-line symbol fairseq-preprocess appends), so the ``sentence_prediction`` layout
``<s> A </s> B </s>`` is BERT's ``[CLS] A [SEP] B [SEP]``. Segments are read off the tokens.
"""
import logging

from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.utils import safe_getattr
from torch import Tensor, nn

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

NUM_SEGMENTS = 2  # BERT's token types: sentence A, sentence B


def segment_ids(src_tokens: Tensor, sep: int) -> Tensor:
    """(B, T) -> (B, T): 0 for [CLS] A [SEP], 1 for everything after the first [SEP] (B [SEP])."""
    is_sep = src_tokens.eq(sep).long()
    seps_before = is_sep.cumsum(dim=1) - is_sep
    return seps_before.gt(0).long()


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


class NormFormerBertEncoder(NormFormerRobertaEncoder):
    sentence_encoder_class = SegmentedSentenceEncoder

    def __init__(self, args, dictionary):
        super().__init__(args, dictionary)
        self.pooler = CLSPooler(args.encoder_embed_dim, args.pooler_activation_fn)
        self.nsp_head = nn.Linear(args.encoder_embed_dim, 2)  # logits of IS_NEXT, NOT_NEXT

    def forward(self, src_tokens, features_only=False, return_all_hiddens=False, masked_tokens=None, **unused):
        """As RobertaEncoder; unless features_only, ``extra["nsp_logits"]`` (B, 2) holds the NSP logits."""
        x, extra = self.extract_features(src_tokens, return_all_hiddens=return_all_hiddens)  # (B, T, C)
        if not features_only:
            extra["nsp_logits"] = self.nsp_head(self.pooler(x))
            x = self.output_layer(x, masked_tokens=masked_tokens)  # (B, T, V) or (M, V)
        return x, extra


@register_model("normformer_bert")
class NormFormerBertModel(NormFormerRobertaModel):
    encoder_class = NormFormerBertEncoder

    def upgrade_state_dict_named(self, state_dict, name):
        """A classification head that the checkpoint lacks (fine-tuning a pre-trained model) starts
        with its dense layer copied from the pre-trained [CLS] pooler, as in BERT's fine-tuning."""
        prefix = name + "." if name != "" else ""
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
        super().upgrade_state_dict_named(state_dict, name)


# ---------------------------------------------------------------------------------------------
# Presets. `postln_bert_*` are BERT as published (Post-LN, LayerNorm on the embeddings; fairseq's
# legacy masked_lm model already owns the names bert_base/bert_large); `preln_bert_*` the Pre-LN
# baselines and `normformer_bert_*` those with the NormFormer operations.
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

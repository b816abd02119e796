"""``normformer_lm_classifier``: a causal ``normformer_lm`` checkpoint fine-tuned through fairseq's
``sentence_prediction`` task, BERT's "LTR & No NSP" row (Devlin et al. 2019, Table 5).

The decoder is ``normformer_lm``'s; RoBERTa's classification head (dense, tanh, out) reads the last
real token (``</s>`` of ``<s> A </s> </s> B </s>``), the only position a left-to-right model has seen the
whole input at (the first, which RoBERTa's head reads, has seen only itself). Restoring an LM
checkpoint: the ``<mask>`` symbol that ``sentence_prediction`` appends to dict.txt gets a new
embedding row (it never occurs in the inputs), and the new head keeps its initialisation.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.models import register_model
from fairseq.models.roberta.model import RobertaClassificationHead
from fairseq.utils import safe_getattr
from torch import nn

from .normformer_lm import NormFormerLanguageModel, NormFormerLanguageModelConfig

EMBEDDINGS = ("decoder.embed_tokens.weight", "decoder.output_projection.weight")


@dataclass
class SentencePredictionLMFields(FairseqDataclass):
    """The fields fairseq's LM config interpolates from a language_modeling task, which
    sentence_prediction does not have; positions come from its --max-positions instead."""

    add_bos_token: bool = False
    tokens_per_sample: Optional[int] = None
    max_target_positions: Optional[int] = field(default=None, metadata={"help": "default: --max-positions"})
    tpu: bool = False


@dataclass
class NormFormerLMClassifierConfig(SentencePredictionLMFields, NormFormerLanguageModelConfig):
    pass


@register_model("normformer_lm_classifier", dataclass=NormFormerLMClassifierConfig)
class NormFormerLMClassifier(NormFormerLanguageModel):
    def __init__(self, decoder):
        super().__init__(decoder)
        self.classification_heads = nn.ModuleDict()

    @classmethod
    def build_model(cls, args, task):
        if safe_getattr(args, "max_target_positions") is None:  # sentence_prediction sets --max-positions
            args.max_target_positions = safe_getattr(args, "max_positions")
        return super().build_model(args, task)

    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        dim = self.decoder.output_embed_dim
        self.classification_heads[name] = RobertaClassificationHead(dim, inner_dim or dim, num_classes, "tanh", 0.0)

    def forward(self, src_tokens, features_only=False, classification_head_name=None, **kwargs):
        if classification_head_name is None:
            return super().forward(src_tokens, features_only=features_only, **kwargs)
        features, extra = self.decoder(src_tokens, features_only=True)  # (B, T, C), right-padded
        last = src_tokens.ne(self.decoder.padding_idx).sum(dim=1) - 1
        last_features = features[torch.arange(features.size(0)), last]  # (B, C)
        return self.classification_heads[classification_head_name](last_features.unsqueeze(1)), extra

    def upgrade_state_dict_named(self, state_dict, name):
        prefix = name + "." if name else ""
        for key in EMBEDDINGS:  # dictionary symbols the checkpoint lacks (<mask>) keep their new rows
            ours, theirs = self.state_dict().get(key), state_dict.get(prefix + key)
            if ours is not None and theirs is not None and theirs.size(0) < ours.size(0):
                state_dict[prefix + key] = torch.cat([theirs, ours[theirs.size(0) :].to(theirs)])
        for head, params in self.classification_heads.state_dict().items():
            state_dict.setdefault(f"{prefix}classification_heads.{head}", params)
        super().upgrade_state_dict_named(state_dict, name)


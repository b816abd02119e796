"""Heads on every token's features, for the fine-tuning tasks beyond GLUE: extractive QA
(start/end logits, BERT §4.2), token classification (a label per token, §5.3) and span
classification (a label per span, Jurafsky & Martin §11.5.2).

A task registers its head in ``build_model`` (``model.register_token_head``), as fairseq's RoBERTa
registers classification heads. Loading a checkpoint without that head (``--restore-file`` of a
pre-trained model) keeps the head's fresh weights; a checkpoint's heads the model did not register,
or registered with other shapes, are dropped with a warning: so pre-trained and fine-tuned
checkpoints load both ways.
"""
import logging

import torch
from torch import Tensor, nn

logger = logging.getLogger(__name__)

TOKEN_HEADS = "token_heads"


class TokenHeadsMixin:
    """For RobertaModel subclasses: ``register_token_head`` and the loading rules above."""

    def register_token_head(self, name: str, head: nn.Module):
        if not hasattr(self, TOKEN_HEADS):
            self.token_heads = nn.ModuleDict()
        self.token_heads[name] = head

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        prefix = (name + "." if name else "") + TOKEN_HEADS + "."
        current = getattr(self, TOKEN_HEADS, nn.ModuleDict()).state_dict()
        for key in [k for k in state_dict if k.startswith(prefix)]:
            ours = current.get(key[len(prefix) :])
            if ours is None or ours.shape != state_dict[key].shape:
                logger.warning(f"dropping {key} from the checkpoint: not a head of this model, or of another shape")
                del state_dict[key]
        for key, value in current.items():
            if prefix + key not in state_dict:
                logger.info(f"{prefix + key}: new, not in the checkpoint")
                state_dict[prefix + key] = value


class TokenClassificationHead(nn.Module):
    """Dropout and a linear layer on each token's features: (B, T, C) -> (B, T, num_outputs).
    Extractive QA uses it with 2 outputs, the start and end logits (BERT's S and E vectors)."""

    def __init__(self, embed_dim: int, num_outputs: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(embed_dim, num_outputs)

    def forward(self, features: Tensor) -> Tensor:
        return self.out_proj(self.dropout(features))


class SpanClassificationHead(nn.Module):
    """Jurafsky & Martin §11.5.2: a span (i, j) of tokens is g_ij = [FFN_start(z_i); FFN_end(z_j);
    pool(z_i..z_j)] and its label distribution softmax(FFN(g_ij)); the contents are pooled by their
    mean or by attention (a softmax over the span of w·z_k). (B, T, C) features and
    (B, S, 2) first/last token positions -> (B, S, num_labels)."""

    def __init__(self, embed_dim: int, num_labels: int, dropout: float, pooling: str = "attention"):
        super().__init__()
        self.start_ffn = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.GELU())
        self.end_ffn = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.GELU())
        self.attention = nn.Linear(embed_dim, 1) if pooling == "attention" else None
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(3 * embed_dim, embed_dim), nn.GELU(),
                                        nn.Dropout(dropout), nn.Linear(embed_dim, num_labels))  # fmt: skip

    def pooling_weights(self, features: Tensor, spans: Tensor) -> Tensor:
        """(B, S, T): each span's weights over its tokens (zero outside)."""
        positions = torch.arange(features.size(1), device=features.device)
        inside = (positions >= spans[..., :1]) & (positions <= spans[..., 1:])
        if self.attention is None:
            return inside.float() / inside.sum(-1, keepdim=True)
        scores = self.attention(features).squeeze(-1).unsqueeze(1)  # (B, 1, T)
        return scores.masked_fill(~inside, float("-inf")).softmax(-1)

    def forward(self, features: Tensor, spans: Tensor) -> Tensor:
        def at(positions):
            return features.gather(1, positions.unsqueeze(-1).expand(-1, -1, features.size(-1)))

        pooled = torch.bmm(self.pooling_weights(features, spans), features)
        g = torch.cat([self.start_ffn(at(spans[..., 0])), self.end_ffn(at(spans[..., 1])), pooled], dim=-1)
        return self.classifier(g)

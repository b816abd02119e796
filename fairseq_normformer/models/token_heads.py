"""Heads on every token's features, for the fine-tuning tasks beyond GLUE: extractive QA
(start/end logits, BERT §4.2) and token classification (a label per token, §5.3).

A task registers its head in ``build_model`` (``model.register_token_head``), as fairseq's RoBERTa
registers classification heads. Loading a checkpoint without that head (``--restore-file`` of a
pre-trained model) keeps the head's fresh weights; a checkpoint's heads the model did not register,
or registered with other shapes, are dropped with a warning: so pre-trained and fine-tuned
checkpoints load both ways.
"""
import logging

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

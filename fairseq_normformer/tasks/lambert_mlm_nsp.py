"""``lambert_mlm_nsp``: ``mlm_nsp`` sized for LaMBERT's segments, with its short-sequence phase.

The pair length follows the model (``--segment-length`` M, ``--max-segments`` S, read when the model
is built): A and B together hold at most (S - 1)·M tokens, so that each sentence padded to a multiple
of M fits in S segments (``--tokens-per-sample`` is not used). With ``--short-phase-epochs K``,
training epochs 1..K draw pairs of at most ``--short-phase-segments`` segments (LaMBERT: 6 segments
for 90% of the steps, as BERT's 128-token phase): choose K as 90% of the epochs. The training data
is then re-planned every epoch; validation always uses the full length. Every example is still a
function of (--seed, epoch, index).
"""
import logging
from dataclasses import dataclass, field

from fairseq.tasks import register_task
from omegaconf import II

from ..models.lambert import SPECIAL_TOKENS_PER_PAIR, LambertSentenceEncoder, max_pair_tokens
from .mlm_nsp import MlmNspConfig, MlmNspTask

logger = logging.getLogger(__name__)

MIN_SEGMENTS = 2  # one for A, one for B


@dataclass
class LambertMlmNspConfig(MlmNspConfig):
    short_phase_segments: int = field(default=6, metadata={"help": "segments per pair in the short phase"})
    short_phase_epochs: int = field(
        default=0, metadata={"help": "training epochs 1..K use short pairs (LaMBERT: 90%% of training); 0: none"}
    )
    train_subset: str = II("dataset.train_subset")


@register_task("lambert_mlm_nsp", dataclass=LambertMlmNspConfig)
class LambertMlmNspTask(MlmNspTask):
    cfg: LambertMlmNspConfig

    def __init__(self, cfg: LambertMlmNspConfig, dictionary):
        super().__init__(cfg, dictionary)
        if cfg.short_phase_segments < MIN_SEGMENTS or cfg.short_phase_epochs < 0:
            raise ValueError(f"--short-phase-segments must be at least {MIN_SEGMENTS} and --short-phase-epochs "
                             f"at least 0, got {cfg.short_phase_segments} and {cfg.short_phase_epochs}")  # fmt: skip
        self.segment_length = self.max_segments = None  # the model's, once built

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        encoder = getattr(model.encoder, "sentence_encoder", None)
        if not isinstance(encoder, LambertSentenceEncoder):
            raise ValueError("--task lambert_mlm_nsp needs a LaMBERT model (--arch lambert_base, lambert_tiny, ...)")
        self.segment_length, self.max_segments = encoder.segment_length, encoder.max_segments
        return model

    def segments_per_pair(self, split: str, epoch: int) -> int:
        if self.segment_length is None:
            raise RuntimeError("lambert_mlm_nsp sizes pairs by the model's segments: build the model before the data")
        if split == self.cfg.train_subset and epoch <= self.cfg.short_phase_epochs:
            return min(self.max_segments, self.cfg.short_phase_segments)
        return self.max_segments

    def tokens_per_pair(self, split: str, epoch: int) -> int:
        return max_pair_tokens(self.segment_length, self.segments_per_pair(split, epoch)) + SPECIAL_TOKENS_PER_PAIR

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        logger.info(f"{split}, epoch {epoch}: pairs of at most {self.segments_per_pair(split, epoch)} segments "
                    f"of {self.segment_length} tokens")  # fmt: skip
        super().load_dataset(split, epoch, combine, **kwargs)

    def max_positions(self):
        return self.tokens_per_pair("valid", epoch=1)

    def has_sharded_data(self, split):
        """True in the short phase, so that fairseq reloads (re-plans) the training data every epoch."""
        return self.cfg.short_phase_epochs > 0 or super().has_sharded_data(split)

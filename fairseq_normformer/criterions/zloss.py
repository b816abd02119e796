"""z-loss (PaLM, Chowdhery et al. 2022, §5; OLMo 2): a coefficient × log²Z added to the LM loss, Z the softmax's
normaliser, which keeps the output logits from drifting (PaLM: 1e-4). ``z_loss`` is the one place it is
computed; ``cross_entropy_zloss`` is fairseq's ``cross_entropy`` (the causal LM's loss) with it, and ``mlm_nsp``
adds it to the masked-LM term (``--zloss``). ``cross_entropy_zloss`` logs ``loss`` as the cross-entropy alone
and ``zloss`` per target token."""
from dataclasses import dataclass, field

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig
from fairseq.logging import metrics
from torch import Tensor

from ..checks import BadInput

ZLOSS_HELP = "z-loss coefficient (PaLM; OLMo 2): coef · log²Z of each predicted token added to the loss; 0: off"


def z_loss(logits: Tensor, coef: float) -> Tensor:
    """(..., V) logits -> (...,) coef · log²Z, Z = Σ_v exp(logit_v) (PaLM's auxiliary loss)."""
    return coef * torch.logsumexp(logits.float(), dim=-1).pow(2)


def check_zloss(coef: float) -> None:
    if coef < 0:
        raise BadInput(f"--zloss {coef}: the z-loss coefficient is >= 0 (PaLM: 1e-4)")


def log_zloss(logging_outputs, sample_size_key: str) -> None:
    """The summed z-loss per unit of ``sample_size_key`` (what the loss is divided by)."""
    if any("zloss" in log for log in logging_outputs):
        size = sum(log.get(sample_size_key, 0) for log in logging_outputs)
        total = sum(log.get("zloss", 0) for log in logging_outputs)
        metrics.log_scalar("zloss", total / max(size, 1), size, round=5)


@dataclass
class CrossEntropyZLossConfig(CrossEntropyCriterionConfig):
    zloss: float = field(default=0.0, metadata={"help": ZLOSS_HELP})


@register_criterion("cross_entropy_zloss", dataclass=CrossEntropyZLossConfig)
class CrossEntropyZLossCriterion(CrossEntropyCriterion):
    """Σ_t CE_t + coef · Σ_t log²Z_t over the target tokens (padding left out)."""

    def __init__(self, task, sentence_avg, zloss):
        check_zloss(zloss)
        super().__init__(task, sentence_avg)
        self.zloss = zloss

    def forward(self, model, sample, reduce=True):
        """fairseq's cross_entropy forward, plus the z-loss of the target tokens (a summed loss only: an
        unreduced one is per-token scoring, where the z-loss is no part of the likelihood)."""
        net_output = model(**sample["net_input"])
        loss, _ = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {"loss": loss.data, "ntokens": sample["ntokens"], "nsentences": sample["target"].size(0),
                          "sample_size": sample_size}  # fmt: skip
        if self.zloss and reduce:
            z = z_loss(net_output[0], self.zloss)[sample["target"].ne(self.padding_idx)].sum()
            logging_output["zloss"] = z.data
            loss = loss + z
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        CrossEntropyCriterion.reduce_metrics(logging_outputs)
        log_zloss(logging_outputs, "ntokens")

"""``mlm_nsp``: BERT's pre-training loss, masked-LM cross-entropy plus next-sentence prediction.

Per sequence s with masked positions M_s:

    loss_s = (1/|M_s|) Σ_{t ∈ M_s} CE(MLM logits_t, token_t)  +  nsp_loss_weight · CE(NSP logits_s, label_s)

and the batch loss is Σ_s loss_s with sample_size = number of sequences. Every term is a sum over
sequences, so fairseq's division by the sample sizes summed over data-parallel workers and
gradient-accumulation steps gives exactly the mean of loss_s over all of them, however the batch
is split. Only the masked positions go through the LM head (as fairseq's ``masked_lm``).
The logged ``mlm_loss``/``mlm_ppl`` are per masked token over all sequences; losses are in base 2.
"""
import math
from dataclasses import dataclass, field

import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics


@dataclass
class MlmNspCriterionConfig(FairseqDataclass):
    nsp_loss_weight: float = field(default=1.0, metadata={"help": "weight of the NSP loss (BERT: 1)"})


@register_criterion("mlm_nsp", dataclass=MlmNspCriterionConfig)
class MlmNspCriterion(FairseqCriterion):
    def __init__(self, cfg: MlmNspCriterionConfig, task):
        super().__init__(task)
        self.nsp_loss_weight = cfg.nsp_loss_weight

    def forward(self, model, sample, reduce=True):
        masked = sample["target"].ne(self.padding_idx)  # (B, T)
        mlm_logits, extra = model(**sample["net_input"], masked_tokens=masked)  # (M, V)
        if "nsp_logits" not in extra:
            raise ValueError("--criterion mlm_nsp needs a model with a next-sentence head (--arch normformer_bert ...)")
        targets = sample["target"][masked]  # (M,), row-major like the masked logits
        token_nll = F.cross_entropy(mlm_logits.float(), targets, reduction="none")  # (M,)
        nsp_nll = F.cross_entropy(extra["nsp_logits"].float(), sample["nsp_target"], reduction="none")  # (B,)

        n_masked = masked.sum(dim=1)  # (B,)
        rows = masked.nonzero()[:, 0]  # the sequence of each masked token
        mlm_per_sequence = token_nll.new_zeros(masked.size(0)).index_add_(0, rows, token_nll)
        mlm_per_sequence = mlm_per_sequence / n_masked.clamp(min=1)
        loss = (mlm_per_sequence + self.nsp_loss_weight * nsp_nll).sum()

        logging_output = {
            "loss": loss.data,
            "mlm_loss": token_nll.sum().data,
            "mlm_correct": (mlm_logits.argmax(dim=-1) == targets).sum().data,
            "n_masked": n_masked.sum().data,
            "nsp_loss": nsp_nll.sum().data,
            "nsp_correct": (extra["nsp_logits"].argmax(dim=-1) == sample["nsp_target"]).sum().data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample["nsentences"],
        }
        return loss, sample["nsentences"], logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sentences, n_masked = total("nsentences"), total("n_masked")
        if sentences == 0:
            return
        metrics.log_scalar("loss", total("loss") / total("sample_size") / math.log(2), total("sample_size"), round=3)
        metrics.log_scalar("nsp_loss", total("nsp_loss") / sentences / math.log(2), sentences, round=3)
        metrics.log_scalar("nsp_accuracy", 100.0 * total("nsp_correct") / sentences, sentences, round=2)
        if n_masked > 0:
            metrics.log_scalar("mlm_loss", total("mlm_loss") / n_masked / math.log(2), n_masked, round=3)
            metrics.log_scalar("mlm_accuracy", 100.0 * total("mlm_correct") / n_masked, n_masked, round=2)
            metrics.log_derived("mlm_ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

"""``mlm_nsp``: BERT's pre-training loss, masked-LM cross-entropy plus next-sentence prediction, and
optionally SpanBERT's span boundary objective (SBO).

Per sequence s with masked positions M_s:

    loss_s = (1/|M_s|) Σ_{t ∈ M_s} [CE(MLM logits_t, token_t) + sbo_loss_weight · CE(SBO logits_t, token_t)]
             + nsp_loss_weight · CE(NSP logits_s, label_s)

and the batch loss is Σ_s loss_s with sample_size = number of sequences. Every term is a sum over
sequences, so fairseq's division by the sample sizes summed over data-parallel workers and
gradient-accumulation steps gives exactly the mean of loss_s over all of them, however the batch
is split. Only the masked positions go through the LM and SBO heads (as fairseq's ``masked_lm``).
The NSP term is there when the batch has NSP labels (not with the task's ``--no-nsp``).
The logged ``mlm_loss``/``mlm_ppl``/``sbo_loss`` are per masked token over all sequences; losses
are in base 2. With ``--zloss`` the MLM term of each sequence adds the mean of coef · log²Z over its masked
tokens (criterions/zloss.py), logged as ``zloss`` per sequence; the logged ``loss`` includes it.
"""
import math
from dataclasses import dataclass, field

import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from .zloss import ZLOSS_HELP, check_zloss, log_zloss, z_loss


@dataclass
class MlmNspCriterionConfig(FairseqDataclass):
    nsp_loss_weight: float = field(default=1.0, metadata={"help": "weight of the NSP loss (BERT: 1)"})
    sbo_loss_weight: float = field(
        default=0.0,
        metadata={"help": "weight of SpanBERT's span boundary objective (SpanBERT: 1); 0: normformer_bert builds "
                  "no SBO head"},
    )  # fmt: skip
    zloss: float = field(default=0.0, metadata={"help": ZLOSS_HELP + " (of the masked tokens' MLM logits)"})


@register_criterion("mlm_nsp", dataclass=MlmNspCriterionConfig)
class MlmNspCriterion(FairseqCriterion):
    def __init__(self, cfg: MlmNspCriterionConfig, task):
        super().__init__(task)
        self.nsp_loss_weight, self.sbo_loss_weight = cfg.nsp_loss_weight, cfg.sbo_loss_weight
        check_zloss(cfg.zloss)
        self.zloss = cfg.zloss

    def forward(self, model, sample, reduce=True):
        masked = sample["target"].ne(self.padding_idx)  # (B, T)
        boundaries = sample["span_boundaries"] if self.sbo_loss_weight > 0 else None
        mlm_logits, extra = model(**sample["net_input"], masked_tokens=masked, span_boundaries=boundaries)  # (M, V)
        check_heads(extra, "nsp_target" in sample, self.sbo_loss_weight > 0)
        targets = sample["target"][masked]  # (M,), row-major like the masked logits
        rows = masked.nonzero()[:, 0]  # the sequence of each masked token
        n_masked = masked.sum(dim=1)  # (B,)

        def per_sequence_mean(token_values):  # (M,) -> (B,)
            return token_values.new_zeros(masked.size(0)).index_add_(0, rows, token_values) / n_masked.clamp(min=1)

        logging_output = {"ntokens": sample["ntokens"], "nsentences": sample["nsentences"],
                          "sample_size": sample["nsentences"], "n_masked": n_masked.sum().data}  # fmt: skip
        token_nll = self.log_token_loss("mlm", mlm_logits, targets, logging_output)
        loss = per_sequence_mean(token_nll).sum()
        if self.zloss:
            z = per_sequence_mean(z_loss(mlm_logits, self.zloss)).sum()
            logging_output["zloss"] = z.data
            loss = loss + z
        if "sbo_logits" in extra:
            sbo_nll = self.log_token_loss("sbo", extra["sbo_logits"], targets, logging_output)
            loss = loss + self.sbo_loss_weight * per_sequence_mean(sbo_nll).sum()
        if "nsp_target" in sample:
            nsp_nll = self.log_token_loss("nsp", extra["nsp_logits"], sample["nsp_target"], logging_output)
            loss = loss + self.nsp_loss_weight * nsp_nll.sum()
        logging_output["loss"] = loss.data
        return loss, sample["nsentences"], logging_output

    @staticmethod
    def log_token_loss(name, logits, targets, logging_output):
        """Cross-entropy per row of ``logits``; its sum and number correct go into the logging output."""
        nll = F.cross_entropy(logits.float(), targets, reduction="none")
        logging_output[f"{name}_loss"] = nll.sum().data
        logging_output[f"{name}_correct"] = (logits.argmax(dim=-1) == targets).sum().data
        return nll

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        def logged(key):
            return any(key in log for log in logging_outputs)

        sentences, n_masked = total("nsentences"), total("n_masked")
        if sentences == 0:
            return
        metrics.log_scalar("loss", total("loss") / total("sample_size") / math.log(2), total("sample_size"), round=3)
        if logged("nsp_loss"):
            metrics.log_scalar("nsp_loss", total("nsp_loss") / sentences / math.log(2), sentences, round=3)
            metrics.log_scalar("nsp_accuracy", 100.0 * total("nsp_correct") / sentences, sentences, round=2)
        if n_masked > 0:
            metrics.log_scalar("mlm_loss", total("mlm_loss") / n_masked / math.log(2), n_masked, round=3)
            metrics.log_scalar("mlm_accuracy", 100.0 * total("mlm_correct") / n_masked, n_masked, round=2)
            metrics.log_derived("mlm_ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))
        log_zloss(logging_outputs, "sample_size")
        if n_masked > 0 and logged("sbo_loss"):
            metrics.log_scalar("sbo_loss", total("sbo_loss") / n_masked / math.log(2), n_masked, round=3)
            metrics.log_scalar("sbo_accuracy", 100.0 * total("sbo_correct") / n_masked, n_masked, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


def check_heads(extra: dict, nsp: bool, sbo: bool):
    """The model's heads must match the objectives: an NSP head exactly when the data has NSP labels
    (not with --no-nsp), an SBO head when --sbo-loss-weight > 0."""
    if nsp and "nsp_logits" not in extra:
        raise ValueError("--criterion mlm_nsp needs a model with a next-sentence head (--arch normformer_bert ...), "
                         "or the task's --no-nsp")  # fmt: skip
    if not nsp and "nsp_logits" in extra:
        raise ValueError("the model has a next-sentence head but the data has no NSP labels (--no-nsp)")
    if sbo and "sbo_logits" not in extra:
        raise ValueError("--sbo-loss-weight > 0 needs a model with a span boundary head (--arch normformer_bert ...)")

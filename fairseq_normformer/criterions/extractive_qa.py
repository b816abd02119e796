"""``extractive_qa``: BERT's SQuAD loss, the mean of the cross-entropies of the start and the end
position over the window's tokens (padding excluded; position 0, [CLS], when the answer is not in
the window), summed over windows (logged in base 2, per window). In validation it also decodes every question's answer
(``data/squad.py``) and logs the official EM and F1 (``metrics/squad.py``), with the task's
``--null-threshold`` for v2.0, and the number of questions they are over."""
import math
from dataclasses import dataclass

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from ..data.squad import best_span
from ..metrics.squad import question_scores
from ..tasks.extractive_qa import HEAD


@dataclass
class ExtractiveQACriterionConfig(FairseqDataclass):
    pass


def answer_logits(model, sample):
    """(W, T) start and end logits, padding at -inf."""
    features, _ = model(**sample["net_input"], features_only=True)
    logits = model.token_heads[HEAD](features).float()  # (W, T, 2)
    padding = sample["net_input"]["src_tokens"].eq(model.encoder.dictionary.pad())
    start, end = logits.masked_fill(padding.unsqueeze(-1), float("-inf")).unbind(dim=-1)
    return start, end


def predict_answers(questions, start, end, max_answer_length):
    """One Prediction per question from the (W, T) logits of all their windows, in order."""
    predictions, w = [], 0
    for q in questions:
        n = len(q.windows)
        predictions.append(best_span(q, start[w : w + n], end[w : w + n], max_answer_length))
        w += n
    return predictions


@register_criterion("extractive_qa", dataclass=ExtractiveQACriterionConfig)
class ExtractiveQACriterion(FairseqCriterion):
    def forward(self, model, sample, reduce=True):
        start, end = answer_logits(model, sample)
        loss = (F.cross_entropy(start, sample["start_positions"], reduction="sum")
                + F.cross_entropy(end, sample["end_positions"], reduction="sum")) / 2  # fmt: skip
        windows = sample["nsentences"]
        logging_output = {"loss": loss.data, "ntokens": sample["ntokens"], "nsentences": windows, "sample_size": windows}
        if not model.training:
            logging_output.update(self.answer_scores(sample["questions"], start.detach(), end.detach()))
        return loss, windows, logging_output

    def answer_scores(self, questions, start, end) -> dict:
        cfg = self.task.cfg
        em = f1 = 0.0
        for q, p in zip(questions, predict_answers(questions, start, end, cfg.max_answer_length)):
            text = "" if cfg.version_2_with_negative and p.null_odds > cfg.null_threshold else p.text
            scores = question_scores([a[0] for a in q.question.answers], text)
            em, f1 = em + scores[0], f1 + scores[1]
        return {"em": em, "f1": f1, "nquestions": len(questions)}

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        if total("sample_size"):
            metrics.log_scalar("loss", total("loss") / total("sample_size") / math.log(2), total("sample_size"), round=3)
        if total("nquestions"):
            for key in ("em", "f1"):
                metrics.log_scalar(key, 100 * total(key) / total("nquestions"), total("nquestions"), round=2)
            metrics.log_scalar_sum("questions", total("nquestions"))  # what EM and F1 are over

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

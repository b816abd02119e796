"""``token_classification``: cross-entropy of each word's label on its first piece, summed over
words (logged in base 2, per word), with token accuracy; in validation also the entity-level
precision, recall and F1 of conlleval (``metrics/conll.py``), summed over the whole split."""
import math
from dataclasses import dataclass

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from ..data.conll import IGNORE
from ..metrics.conll import chunk_counts, precision_recall_f1
from ..tasks.token_classification import HEAD


@dataclass
class TokenClassificationCriterionConfig(FairseqDataclass):
    pass


def label_logits(model, sample):
    features, _ = model(**sample["net_input"], features_only=True)
    return model.token_heads[HEAD](features).float()  # (B, T, labels)


def predicted_tags(sentences, logits, labels: list) -> list:
    """Per sentence, a tag per word: the argmax at its first piece; words cut off get O."""
    best = logits.argmax(dim=-1).tolist()
    return [[labels[best[b][p]] for p in e.first_pieces] + ["O"] * (len(e.sentence.words) - len(e.first_pieces))
            for b, e in enumerate(sentences)]  # fmt: skip


@register_criterion("token_classification", dataclass=TokenClassificationCriterionConfig)
class TokenClassificationCriterion(FairseqCriterion):
    def forward(self, model, sample, reduce=True):
        logits = label_logits(model, sample)
        target = sample["target"]
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), ignore_index=IGNORE, reduction="sum")
        words = int(target.ne(IGNORE).sum())
        correct = (logits.argmax(-1).eq(target) & target.ne(IGNORE)).sum()
        logging_output = {"loss": loss.data, "ntokens": sample["ntokens"], "nsentences": sample["nsentences"],
                          "sample_size": words, "correct": correct.data}  # fmt: skip
        if not model.training:
            tags = predicted_tags(sample["sentences"], logits.detach(), self.task.labels)
            counts = [chunk_counts(e.sentence.tags, t) for e, t in zip(sample["sentences"], tags)]
            for i, key in enumerate(("chunks_correct", "chunks_predicted", "chunks_gold")):
                logging_output[key] = sum(c[i] for c in counts)
        return loss, words, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        words = total("sample_size")
        if words:
            metrics.log_scalar("loss", total("loss") / words / math.log(2), words, round=3)
            metrics.log_scalar("accuracy", 100 * total("correct") / words, words, round=2)
        if any("chunks_gold" in log for log in logging_outputs):
            for key in ("chunks_correct", "chunks_predicted", "chunks_gold"):
                metrics.log_scalar_sum(key, total(key))
            for i, name in enumerate(("precision", "recall", "f1")):
                metrics.log_derived(name, lambda m, i=i: round(precision_recall_f1(
                    m["chunks_correct"].sum, m["chunks_predicted"].sum, m["chunks_gold"].sum)[i], 2))  # fmt: skip

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

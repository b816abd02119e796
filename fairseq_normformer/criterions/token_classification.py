"""``token_classification``: cross-entropy of each word's label on its first piece, summed over
words (logged in base 2, per word), with token accuracy; in validation also the entity-level
precision, recall and F1 of conlleval (``metrics/conll.py``), summed over the whole split. With the
task's ``--span-classification`` the same over every enumerated span's label (NULL or a type), and
the entities are the decoded spans (``data/spans.py``)."""
import math
from dataclasses import dataclass

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from ..data.conll import IGNORE
from ..data.spans import decode_spans, spans_to_tags
from ..metrics.conll import chunks, entity_counts, precision_recall_f1


@dataclass
class TokenClassificationCriterionConfig(FairseqDataclass):
    pass


def label_logits(model, sample, head_name: str):
    """(B, T, labels) per token, or (B, S, labels) per span when the batch has ``spans``."""
    features, _ = model(**sample["net_input"], features_only=True)
    head = model.token_heads[head_name]
    return (head(features, sample["spans"]) if "spans" in sample else head(features)).float()


def predicted_tags(sentences, logits, labels: list) -> list:
    """Per sentence, a tag per word: the argmax at its first piece; words cut off get O."""
    best = logits.argmax(dim=-1).tolist()
    return [[labels[best[b][p]] for p in e.first_pieces] + ["O"] * (len(e.sentence.words) - len(e.first_pieces))
            for b, e in enumerate(sentences)]  # fmt: skip


def predict_entities(task, sample, logits) -> list:
    """Per sentence, (BIO tags, entities {(type, first, last)}): from the tags, or from the spans
    (tags of the non-overlapping ones)."""
    if "spans" not in sample:
        return [(tags, chunks(tags)) for tags in predicted_tags(sample["sentences"], logits, task.labels)]
    out = []
    for b, e in enumerate(sample["sentences"]):
        spans = sample["span_words"][b]
        entities = decode_spans(logits[b, : len(spans)], spans, task.labels, task.cfg.span_decoding == "all")
        out.append((spans_to_tags(entities, len(e.sentence.words)), entities))
    return out


@register_criterion("token_classification", dataclass=TokenClassificationCriterionConfig)
class TokenClassificationCriterion(FairseqCriterion):
    def forward(self, model, sample, reduce=True):
        logits = label_logits(model, sample, self.task.head_name)
        target = sample.get("span_target", sample["target"])
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), ignore_index=IGNORE, reduction="sum")
        words = int(target.ne(IGNORE).sum())
        correct = (logits.argmax(-1).eq(target) & target.ne(IGNORE)).sum()
        logging_output = {"loss": loss.data, "ntokens": sample["ntokens"], "nsentences": sample["nsentences"],
                          "sample_size": words, "correct": correct.data}  # fmt: skip
        if not model.training:
            predicted = predict_entities(self.task, sample, logits.detach())
            counts = [entity_counts(chunks(e.sentence.tags), p[1]) for e, p in zip(sample["sentences"], predicted)]
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

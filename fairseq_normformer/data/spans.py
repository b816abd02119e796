"""Span classification (Jurafsky & Martin §11.5.2) on CoNLL data: every span of up to L words is
an example, labelled with its entity type or NULL. The gold spans are the tag column's chunks
(``metrics/conll.py``); spans may nest, since each span is classified on its own. Decoding keeps
all non-NULL spans or, greedily by score, the best non-overlapping ones (J&M's decoding)."""
import torch
from fairseq.data import data_utils
from torch.nn.utils.rnn import pad_sequence

from ..metrics.conll import chunks
from .conll import IGNORE, TaggedDataset

NULL = "NULL"  # label 0: not an entity


def enumerate_spans(n_words: int, max_length: int) -> list:
    """(first, last) words of every span of 1..max_length words, by first word then length."""
    return [(i, j) for i in range(n_words) for j in range(i, min(i + max_length, n_words))]


def last_pieces(encoded) -> list:
    """Per word kept, the position of its last piece in ``encoded.tokens`` (before [SEP])."""
    return [nxt - 1 for nxt in encoded.first_pieces[1:]] + [len(encoded.tokens) - 2] if encoded.first_pieces else []


def span_labels(train_sentences) -> list:
    """NULL, then the entity types of the training tags, sorted."""
    return [NULL] + sorted({kind for s in train_sentences for kind, _, _ in chunks(s.tags)})


class SpanDataset(TaggedDataset):
    """TaggedDataset whose batches add, per sentence, its spans (``spans``: (B, S, 2) first and
    last token positions, padded with (0, 0)), their words (``span_words``) and labels
    (``span_target`` (B, S), IGNORE on padding)."""

    def __init__(self, sentences, pad, shuffle, seed, label_ids: dict, max_span_length: int):
        super().__init__(sentences, pad, shuffle, seed)
        self.label_ids, self.max_span_length = label_ids, max_span_length

    def collater(self, items):
        batch = super().collater(items)
        if not batch:
            return batch
        words, positions, targets = [], [], []
        for e in batch["sentences"]:
            spans = enumerate_spans(len(e.first_pieces), self.max_span_length)
            gold = {(i, j): kind for kind, i, j in chunks(e.sentence.tags)}
            last = last_pieces(e)
            words.append(spans)
            positions.append(torch.tensor([(e.first_pieces[i], last[j]) for i, j in spans]).view(-1, 2).long())
            targets.append(torch.tensor([self.label_ids[gold.get(s, NULL)] for s in spans], dtype=torch.long))
        batch["spans"] = pad_sequence(positions, batch_first=True)
        batch["span_target"] = data_utils.collate_tokens(targets, IGNORE)
        batch["span_words"] = words
        return batch


def decode_spans(logits, spans: list, labels: list, keep_all: bool) -> set:
    """{(type, first, last)} from one sentence's (S, labels) logits: the spans whose best label is
    not NULL; unless ``keep_all``, greedily the most probable first, skipping overlaps."""
    probabilities, best = logits.softmax(-1).max(-1)
    found = [(float(p), spans[s], labels[b]) for s, (p, b) in enumerate(zip(probabilities, best.tolist())) if b != 0]
    if keep_all:
        return {(kind, i, j) for _, (i, j), kind in found}
    kept, used = set(), set()
    for _, (i, j), kind in sorted(found, key=lambda f: -f[0]):
        if used.isdisjoint(range(i, j + 1)):
            kept.add((kind, i, j))
            used.update(range(i, j + 1))
    return kept


def spans_to_tags(spans, n_words: int) -> list:
    """BIO tags of non-overlapping spans {(type, first, last)}; words of an overlapping later span keep
    the earlier tag."""
    tags = ["O"] * n_words
    for kind, i, j in sorted(spans, key=lambda s: (s[1], s[2])):
        if all(t == "O" for t in tags[i : j + 1]):
            tags[i : j + 1] = [f"B-{kind}"] + [f"I-{kind}"] * (j - i)
    return tags

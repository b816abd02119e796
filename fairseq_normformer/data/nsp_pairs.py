"""Sentence pairs for next-sentence prediction, from documents in BERT's format.

Input: a fairseq-preprocess'ed dataset of BERT-format text, one sentence per line (each item ends
with ``</s>``) and an empty line (an item that is only ``</s>``) between documents.

At load time each document is cut into *chunks* of consecutive sentences, as BERT's
``create_instances_from_document``: sentences are added until the chunk holds at least two
sentences and at least the document's target length (``tokens_per_sample - 3``, or with
probability ``short_seq_prob`` a random length in [2, tokens_per_sample - 3]); a last single
sentence joins the chunk before it. One chunk is one example. The plan depends on the seed only,
so example sizes are fixed; what each example holds is drawn anew from (seed, epoch, index):

* A is the chunk's first 1..n-1 sentences; with probability 1/2 B is the rest (a true continuation,
  label IS_NEXT), otherwise B is a negative (NOT_NEXT), by ``negatives``:
  - ``random``: from a random other document, starting at a random sentence (BERT);
  - ``same-document``: from the same document, starting at a sentence that neither overlaps nor
    touches A (at least one sentence in between; LaMBERT's harder negative); when the document has
    no such sentence, B comes from another document as with ``random``;
  - ``swap``: the true continuation placed first: ``[CLS] B [SEP] A [SEP]`` (sentence order, ALBERT).
* The pair is truncated to the chunk's budget by trimming the longer side, A from its start and
  B from its end, so the A|B junction of a continuation stays intact.
"""
import logging
from typing import List, Tuple

import numpy as np
import torch
from fairseq.data import FairseqDataset

IS_NEXT, NOT_NEXT = 0, 1  # NSP labels, as HuggingFace's BertForPreTraining (the head's logit order)
NUM_SEGMENTS = 2  # BERT's token types: sentence A, sentence B


def segment_ids(src_tokens: torch.Tensor, sep: int) -> torch.Tensor:
    """(B, T) -> (B, T): 0 for [CLS] A [SEP], 1 for everything after the first [SEP] (B [SEP])."""
    is_sep = src_tokens.eq(sep).long()
    seps_before = is_sep.cumsum(dim=1) - is_sep
    return seps_before.gt(0).long()

logger = logging.getLogger(__name__)

NEGATIVE_STRATEGIES = ["random", "same-document", "swap"]
SPECIAL_TOKENS_PER_PAIR = 3  # [CLS] A [SEP] B [SEP]
_PLAN_SALT, _PAIR_SALT = 0, 1  # keep the random streams of planning and of examples apart


def check_tokens_per_sample(tokens_per_sample: int):
    if tokens_per_sample < SPECIAL_TOKENS_PER_PAIR + 2:
        raise ValueError(
            f"--tokens-per-sample={tokens_per_sample} is too small for [CLS] A [SEP] B [SEP]: "
            f"need at least {SPECIAL_TOKENS_PER_PAIR + 2}"
        )


def find_documents(sizes: np.ndarray) -> Tuple[List[np.ndarray], int]:
    """Dataset indices of each document's sentences (items of size 1, empty lines, separate
    documents), and the number of single-sentence documents dropped (they cannot form a pair)."""
    boundaries = np.flatnonzero(sizes <= 1)
    documents = [d for d in np.split(np.arange(len(sizes)), boundaries) if len(d)]
    documents = [d[sizes[d] > 1] for d in documents]  # drop the separator itself
    single = sum(1 for d in documents if len(d) == 1)
    return [d for d in documents if len(d) >= 2], single


def plan_chunks(documents, sentence_lengths, max_tokens, short_seq_prob, rng) -> np.ndarray:
    """(N, 3) int array of (document, first sentence, end sentence) per chunk; see module doc."""
    chunks = []
    for doc_id, doc in enumerate(documents):
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = int(rng.integers(2, max_tokens + 1))
        start, length = 0, 0
        for i in range(len(doc)):
            length += sentence_lengths[doc[i]]
            if i + 1 - start >= 2 and length >= target:
                chunks.append([doc_id, start, i + 1])
                start, length = i + 1, 0
        if len(doc) - start >= 2:
            chunks.append([doc_id, start, len(doc)])
        elif start < len(doc):  # a last single sentence joins the chunk before it
            chunks[-1][2] = len(doc)
    return np.array(chunks, dtype=np.int64).reshape(-1, 3)


def truncate_pair(a: np.ndarray, b: np.ndarray, budget: int) -> Tuple[np.ndarray, np.ndarray]:
    """Trim the longer of A and B one token at a time until both fit: A loses tokens at its start,
    B at its end, so that the tokens where A meets B are kept."""
    len_a, len_b = len(a), len(b)
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return a[len(a) - len_a :], b[:len_b]


class NspPairDataset(FairseqDataset):
    """Items: {"tokens": LongTensor ``[CLS] A [SEP] B [SEP]``, "nsp_label": IS_NEXT or NOT_NEXT}."""

    special_tokens = SPECIAL_TOKENS_PER_PAIR
    draws_negatives = True

    def __init__(self, sentences, dictionary, tokens_per_sample, negatives="random", short_seq_prob=0.1, seed=1):
        super().__init__()
        if negatives not in NEGATIVE_STRATEGIES:
            raise ValueError(f"negatives={negatives!r} is not one of {', '.join(NEGATIVE_STRATEGIES)}")
        check_tokens_per_sample(tokens_per_sample)
        self.sentences, self.negatives, self.seed = sentences, negatives, seed
        self.cls, self.sep = dictionary.bos(), dictionary.eos()
        self.epoch = 1
        sizes = np.asarray(sentences.sizes)
        self.documents, single = find_documents(sizes)
        self.sentence_lengths = sizes - 1  # without the trailing </s>
        max_tokens = tokens_per_sample - self.special_tokens
        if self.draws_negatives and negatives != "swap" and len(self.documents) < 2:
            raise ValueError(
                f"--nsp-negatives={negatives} needs at least 2 documents of 2 or more sentences; "
                f"the data has {len(self.documents)}"
            )
        rng = np.random.default_rng((seed, _PLAN_SALT))
        self.chunks = plan_chunks(self.documents, self.sentence_lengths, max_tokens, short_seq_prob, rng)
        chunk_tokens = np.array([self._span_length(doc, s, e) for doc, s, e in self.chunks], dtype=np.int64)
        self.budgets = np.minimum(chunk_tokens, max_tokens)
        self._sizes = self.budgets + self.special_tokens
        logger.info(
            f"{len(self.chunks)} {self.describe()} from {len(self.documents)} documents; "
            f"skipped {single} single-sentence documents (no pair possible)"
        )

    def describe(self) -> str:
        return f"sentence-pair examples (negatives: {self.negatives})"

    # -- the plan --
    def _span_length(self, doc: int, start: int, end: int) -> int:
        return int(self.sentence_lengths[self.documents[doc][start:end]].sum())

    def _tokens(self, doc: int, start: int, end: int) -> np.ndarray:
        """Tokens of sentences [start, end) of a document, without their </s>."""
        if end <= start:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([self.sentences[i][:-1].numpy() for i in self.documents[doc][start:end]])

    def _fill(self, doc: int, start: int, stop: int, target_len: int) -> Tuple[int, int, int]:
        """Sentences from ``start`` (not past ``stop``) until they hold ``target_len`` tokens (at least one)."""
        end, length = start, 0
        while end < stop and (end == start or length < target_len):
            length += self.sentence_lengths[self.documents[doc][end]]
            end += 1
        return doc, start, end

    # -- negatives: each returns (document, first sentence, end sentence) of B --
    def _random_document_b(self, doc: int, target_len: int, rng) -> Tuple[int, int, int]:
        other = int(rng.integers(len(self.documents) - 1))
        other += other >= doc  # any document but this one
        start = int(rng.integers(len(self.documents[other])))
        return self._fill(other, start, len(self.documents[other]), target_len)

    def _same_document_b(self, doc: int, a_start: int, a_end: int, target_len: int, rng):
        """B starts at least two sentences before A (and stops a sentence short of it) or at least
        one sentence after A's end; None when the document has no such sentence."""
        before = np.arange(0, a_start - 1)
        after = np.arange(a_end + 1, len(self.documents[doc]))
        starts = np.concatenate([before, after])
        if len(starts) == 0:
            return None
        start = int(rng.choice(starts))
        stop = a_start - 1 if start < a_start else len(self.documents[doc])
        return self._fill(doc, start, stop, target_len)

    # -- items --
    def pair(self, index: int) -> Tuple[np.ndarray, np.ndarray, int]:
        """(A tokens, B tokens, label) of example ``index`` in the current epoch."""
        rng = np.random.default_rng((self.seed, self.epoch, index, _PAIR_SALT))
        doc, start, end = (int(x) for x in self.chunks[index])
        budget = int(self.budgets[index])
        a_end = start + int(rng.integers(1, end - start))
        a = self._tokens(doc, start, a_end)
        b_sentences, swap, label = (doc, a_end, end), False, IS_NEXT
        if rng.random() >= 0.5:
            label = NOT_NEXT
            if self.negatives == "swap":
                swap = True
            else:
                b_sentences = None
                if self.negatives == "same-document":
                    b_sentences = self._same_document_b(doc, start, a_end, budget - len(a), rng)
                if b_sentences is None:
                    b_sentences = self._random_document_b(doc, budget - len(a), rng)
        a, b = truncate_pair(a, self._tokens(*b_sentences), budget)
        return (b, a, label) if swap else (a, b, label)

    def __getitem__(self, index: int) -> dict:
        a, b, label = self.pair(index)
        tokens = np.concatenate([[self.cls], a, [self.sep], b, [self.sep]])
        return {"tokens": torch.from_numpy(tokens.astype(np.int64)), "nsp_label": label}

    def __len__(self) -> int:
        return len(self.chunks)

    @property
    def sizes(self) -> np.ndarray:
        """An upper bound of each example's length (its exact length for continuations)."""
        return self._sizes

    def num_tokens(self, index: int) -> int:
        return int(self._sizes[index])

    def size(self, index: int) -> int:
        return int(self._sizes[index])

    def set_epoch(self, epoch: int):
        self.epoch = epoch

    @property
    def can_reuse_epoch_itr_across_epochs(self) -> bool:
        return True  # sizes are fixed by the plan; only the contents change with the epoch


class ContiguousTextDataset(NspPairDataset):
    """Items without NSP: {"tokens": LongTensor ``[CLS] text [SEP]``}, one segment of contiguous text
    from one document (BERT's Table 5 "No NSP"; SpanBERT's single segments; RoBERTa's DOC-SENTENCES).
    The examples are the chunks of the same plan as the sentence pairs (for the length
    ``tokens_per_sample - 2``), cut at the end to that length; only the masking changes per epoch."""

    special_tokens = 2  # [CLS] text [SEP]
    draws_negatives = False

    def describe(self) -> str:
        return "single-segment examples (no NSP)"

    def __getitem__(self, index: int) -> dict:
        doc, start, end = (int(x) for x in self.chunks[index])
        text = self._tokens(doc, start, end)[: self.budgets[index]]
        tokens = np.concatenate([[self.cls], text, [self.sep]])
        return {"tokens": torch.from_numpy(tokens.astype(np.int64))}

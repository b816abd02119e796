"""CoNLL-2003 files for token classification: one token a line (``word POS chunk tag``; only the
first and the last column are read, so ``word tag`` works too; every line of a file has the same
number of columns), an empty line between sentences,
``-DOCSTART-`` lines skipped. The label of a word goes on its first piece (BERT §5.3); the other
pieces get no target."""
import re
from dataclasses import dataclass

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from ..checks import BadInput

IGNORE = -100  # no target (continuation pieces, [CLS], [SEP]): cross_entropy's ignore_index
TAG = re.compile(r"O|[BIES]-\S+")


@dataclass
class TaggedSentence:
    words: list
    tags: list
    line: int  # line of the first word, for error messages


def read_conll(path) -> list:
    """The sentences of a CoNLL file. Errors (BadInput) name the file and line: a line with fewer than
    two columns or with another number of columns than the file's first, a file without sentences."""
    sentences, words, tags, first, width = [], [], [], 0, None  # width: (columns, line) of the first word
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(list(f) + [""], start=1):
            columns = line.split()
            if columns and columns[0] == "-DOCSTART-":
                continue
            if not columns:
                if words:
                    sentences.append(TaggedSentence(words, tags, first))
                words, tags = [], []
                continue
            if len(columns) < 2:
                raise BadInput(f"{path}:{number}: malformed CoNLL line {line.rstrip()!r}: expected 'word ... tag'")
            width = width or (len(columns), number)
            if len(columns) != width[0]:
                raise BadInput(f"{path}:{number}: {len(columns)} columns in {line.rstrip()!r}, "
                               f"but line {width[1]} has {width[0]}")  # fmt: skip
            first = first if words else number
            words.append(columns[0])
            tags.append(columns[-1])
    if not sentences:
        raise BadInput(f"{path}: no sentences")
    return sentences


def check_labels(sentences: list, labels: list, path):
    known = set(labels)
    for s in sentences:
        for i, tag in enumerate(s.tags):
            if tag not in known:
                raise BadInput(f"{path}:{s.line + i}: label {tag!r} does not occur in the training data "
                               f"({', '.join(labels)})")  # fmt: skip


def check_tag_scheme(sentences: list, path):
    """Tags are O or B-, I-, E-, S- and a type (IOB1, BIO, IOBES): what the entity scores read."""
    for s in sentences:
        for i, tag in enumerate(s.tags):
            if not TAG.fullmatch(tag):
                raise BadInput(f"{path}:{s.line + i}: tag {tag!r} is not O or B-, I-, E-, S- and a type "
                               "(IOB1, BIO, IOBES): pass --allow-other-tags to train on other tags")  # fmt: skip


@dataclass
class EncodedSentence:
    sentence: TaggedSentence
    tokens: list  # [CLS] pieces [SEP]
    first_pieces: list  # per word kept, the position of its first piece in tokens
    targets: list  # per token, the label id of its word's first piece, else IGNORE


def encode_sentence(s: TaggedSentence, encoder, label_ids: dict, max_seq_length: int) -> EncodedSentence:
    """Words whose pieces do not fit in max_seq_length are cut (and predicted O)."""
    d, pieces = encoder.dictionary, encoder.encode_words(s.words)
    kept = [w for w, first in enumerate(pieces.first_of) if first < max_seq_length - 2]
    ids = pieces.ids[: max_seq_length - 2]
    targets = [IGNORE] * (len(ids) + 2)
    for w in kept:
        targets[pieces.first_of[w] + 1] = label_ids[s.tags[w]]
    return EncodedSentence(s, [d.bos()] + ids + [d.eos()], [pieces.first_of[w] + 1 for w in kept], targets)


class TaggedDataset(FairseqDataset):
    def __init__(self, sentences: list, pad: int, shuffle: bool, seed: int):
        self.sentences, self.pad, self.shuffle, self.seed = sentences, pad, shuffle, seed
        self.sizes = np.array([len(s.tokens) for s in sentences])

    def __getitem__(self, index):
        return {"id": index, "sentence": self.sentences[index]}

    def __len__(self):
        return len(self.sentences)

    def num_tokens(self, index):
        return self.sizes[index]

    def size(self, index):
        return self.sizes[index]

    def ordered_indices(self):
        return np.random.default_rng(self.seed).permutation(len(self)) if self.shuffle else np.arange(len(self))

    def collater(self, items):
        if not items:
            return {}
        encoded = [item["sentence"] for item in items]
        return {
            "id": torch.tensor([item["id"] for item in items]),
            "nsentences": len(items),
            "ntokens": sum(len(e.tokens) for e in encoded),
            "net_input": {"src_tokens": data_utils.collate_tokens([torch.tensor(e.tokens) for e in encoded], self.pad)},
            "target": data_utils.collate_tokens([torch.tensor(e.targets) for e in encoded], IGNORE),
            "sentences": encoded,
        }

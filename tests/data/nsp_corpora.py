"""Hand-made BERT-format corpora for the pairing and masking tests.

Every token id is unique and names its place: ``place[id] = (document, sentence, position)``, so a
test can decode any example back to where its tokens came from.
"""
import numpy as np
import torch
from fairseq.data import Dictionary, ListDataset


class PlacedCorpus:
    def __init__(self, sentence_counts, sentence_lengths=(2, 6), seed=0, separators=1):
        """sentence_counts: sentences per document; ``separators`` empty lines between documents."""
        rng = np.random.default_rng(seed)
        self.dictionary = Dictionary()
        self.place = {}
        self.document_tokens = []  # per document: its token ids in order, no </s>
        self.sentence_starts = []  # per document: the positions where its sentences start
        items = []
        for doc, n_sentences in enumerate(sentence_counts):
            if doc:
                items += [torch.tensor([self.dictionary.eos()])] * separators
            tokens, starts = [], []
            for sent in range(n_sentences):
                starts.append(len(tokens))
                sentence = []
                for pos in range(int(rng.integers(*sentence_lengths, endpoint=True))):
                    idx = self.dictionary.add_symbol(f"\u2581d{doc}s{sent}p{pos}")
                    self.place[idx] = (doc, sent, pos)
                    sentence.append(idx)
                tokens += sentence
                items.append(torch.tensor(sentence + [self.dictionary.eos()]))
            self.document_tokens.append(tokens)
            self.sentence_starts.append(starts)
        self.dictionary.add_symbol("<mask>")
        self.sentences = ListDataset(items, sizes=np.array([len(t) for t in items]))

    def locate(self, tokens):
        """(document, first offset, last offset) of a run of tokens, or None when it is not one
        contiguous stretch of one document."""
        docs = {self.place[int(t)][0] for t in tokens}
        if len(docs) != 1:
            return None
        doc = docs.pop()
        stream = self.document_tokens[doc]
        first = stream.index(int(tokens[0]))
        if stream[first : first + len(tokens)] != [int(t) for t in tokens]:
            return None
        return doc, first, first + len(tokens) - 1

    def sentence_of(self, doc, offset):
        return int(np.searchsorted(self.sentence_starts[doc], offset, side="right")) - 1


def split_pair(tokens, dictionary):
    """``[CLS] A [SEP] B [SEP]`` -> (A, B) as lists of ids."""
    tokens = [int(t) for t in tokens]
    assert tokens[0] == dictionary.bos() and tokens[-1] == dictionary.eos()
    sep = tokens.index(dictionary.eos())
    return tokens[1:sep], tokens[sep + 1 : -1]

"""Words to the pre-training corpus's SentencePiece pieces and dictionary ids, keeping which word
each piece came from: the fine-tuning tasks label words (token classification) or map predicted
pieces back to characters (extractive QA). Each whitespace-separated word is encoded on its own,
as BERT's fine-tuning does; SentencePiece splits at whitespace anyway, so the pieces are those
of the pre-training text."""
import re
from dataclasses import dataclass

import sentencepiece as spm
from fairseq.data import Dictionary

WORD = re.compile(r"\S+")


def word_spans(text: str) -> list:
    """(start, end) character offsets of the whitespace-separated words of ``text``."""
    return [m.span() for m in WORD.finditer(text)]


@dataclass
class Subwords:
    ids: list  # dictionary ids of the pieces
    word_of: list  # per piece, the index of its word
    first_of: list  # per word, the index of its first piece


class SubwordEncoder:
    def __init__(self, spm_model, dictionary: Dictionary):
        self.sp = spm.SentencePieceProcessor(model_file=str(spm_model))
        self.dictionary = dictionary

    def encode(self, text: str) -> list:
        """Dictionary ids of the pieces of ``text`` (unknown pieces: <unk>)."""
        return [self.dictionary.index(p) for p in self.sp.encode(text, out_type=str)]

    def encode_words(self, words: list) -> Subwords:
        """Every word gets at least one piece (<unk> if SentencePiece returns none)."""
        ids, word_of, first_of = [], [], []
        for w, pieces in enumerate(self.sp.encode(list(words), out_type=str) if words else []):
            first_of.append(len(ids))
            ids += [self.dictionary.index(p) for p in pieces] or [self.dictionary.unk()]
            word_of += [w] * (len(ids) - first_of[-1])
        return Subwords(ids, word_of, first_of)

"""BERT's masked-LM corruption (Devlin et al. 2019, §3.1), by token, whole word or span.

A *unit* is what gets chosen and corrupted as one: a token; a whole word (a SentencePiece piece
starting with '▁' and the pieces that follow it); or a span of whole words (SpanBERT, Joshi et al.
2020, §3.1). Units are chosen until ``mask_prob`` of the maskable tokens are covered; each chosen
unit then becomes [MASK] (80%), random tokens (10%) or stays itself (10%), and every token of it is
a prediction target. Special symbols ([CLS], [SEP], padding) are never maskable.
"""
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, data_utils

WORD_START = "\u2581"  # SentencePiece's word-boundary marker '▁'
_MASK_SALT = 2  # a random stream apart from the pair construction's (nsp_pairs uses 0 and 1)
MAX_SPAN_ATTEMPTS = 100  # SpanBERT samples spans until the budget is met; give up after this many per token


@dataclass
class MaskingConfig:
    mask_prob: float = 0.15  # fraction of maskable tokens that become prediction targets
    leave_unmasked_prob: float = 0.1  # of those, fraction left as they are
    random_token_prob: float = 0.1  # of those, fraction replaced by a random token
    whole_words: bool = False  # units are whole words
    spans: bool = False  # units are spans of whole words, lengths ~ clipped Geometric(span_p)
    span_p: float = 0.2
    max_span_words: int = 10

    def __post_init__(self):
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"--mask-prob must be in (0, 1), got {self.mask_prob}")
        for name in ("leave_unmasked_prob", "random_token_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(self, name)}")
        if self.leave_unmasked_prob + self.random_token_prob > 1.0:
            raise ValueError("--leave-unmasked-prob plus --random-token-prob must be at most 1")
        if not 0.0 < self.span_p <= 1.0 or self.max_span_words < 1:
            raise ValueError("--span-geometric-p must be in (0, 1] and --span-max-words at least 1")


def span_length_distribution(p: float, max_len: int) -> np.ndarray:
    """SpanBERT: P(ℓ) ∝ p (1-p)^(ℓ-1) for ℓ = 1..max_len (renormalised; mean 3.8 for p=0.2, max 10)."""
    lengths = np.arange(1, max_len + 1)
    probs = p * (1 - p) ** (lengths - 1)
    return probs / probs.sum()


def word_start_symbols(dictionary) -> np.ndarray:
    """(V,) bool: which symbols begin a word. Special symbols count as word starts."""
    starts = np.array([sym.startswith(WORD_START) for sym in dictionary.symbols], dtype=bool)
    if not starts.any():
        raise ValueError(
            "whole-word and span masking need a SentencePiece dictionary (pieces that begin a word "
            f"start with {WORD_START!r}); this dictionary has none"
        )
    starts[: dictionary.nspecial] = True
    return starts


def replacement_symbols(dictionary, mask_idx: int) -> np.ndarray:
    """Ids a random replacement may use: ordinary symbols (no specials, [MASK], or padding fillers)."""
    return np.array(
        [
            i
            for i, sym in enumerate(dictionary.symbols)
            if i >= dictionary.nspecial and i != mask_idx and not sym.startswith("madeupword")
        ]
    )


class Masker:
    """Corrupts one token sequence; all randomness comes from the ``rng`` passed in."""

    def __init__(self, cfg: MaskingConfig, dictionary, mask_idx: int):
        self.cfg = cfg
        self.pad, self.mask_idx = dictionary.pad(), mask_idx
        self.replacements = replacement_symbols(dictionary, mask_idx)
        self.word_starts = word_start_symbols(dictionary) if cfg.whole_words or cfg.spans else None
        self.span_lengths = span_length_distribution(cfg.span_p, cfg.max_span_words)

    def __call__(self, tokens: np.ndarray, maskable: np.ndarray, rng: np.random.Generator) -> Tuple[np.ndarray, ...]:
        """tokens, maskable: (T,). Returns (source, target): the corrupted input and the original
        tokens at the chosen positions (padding elsewhere)."""
        positions = np.flatnonzero(maskable)
        # probabilistic rounding keeps the expected rate exact; a budget of at least one token
        budget = max(1, int(self.cfg.mask_prob * len(positions) + rng.random()))
        units = self.choose_units(tokens, positions, budget, rng)
        source, target = tokens.copy(), np.full_like(tokens, self.pad)
        for unit in units:
            target[unit] = tokens[unit]
            self.corrupt(source, unit, rng)
        return source, target

    def choose_units(self, tokens, positions, budget, rng) -> List[np.ndarray]:
        if self.cfg.spans:
            return choose_spans(split_words(tokens, positions, self.word_starts), budget, self.span_lengths, rng)
        if self.cfg.whole_words:
            return choose_whole_words(split_words(tokens, positions, self.word_starts), budget, rng)
        return [p[None] for p in rng.choice(positions, size=min(budget, len(positions)), replace=False)]

    def corrupt(self, source: np.ndarray, unit: np.ndarray, rng: np.random.Generator):
        """BERT's 80/10/10, decided once for the whole unit."""
        u = rng.random()
        if u < self.cfg.random_token_prob:
            source[unit] = rng.choice(self.replacements, size=len(unit))
        elif u < self.cfg.random_token_prob + self.cfg.leave_unmasked_prob:
            pass  # the token stays, but is still predicted
        else:
            source[unit] = self.mask_idx


def split_words(tokens: np.ndarray, positions: np.ndarray, word_starts: np.ndarray) -> List[np.ndarray]:
    """Maskable positions grouped into words: a word starts at a word-start piece or after a gap."""
    if len(positions) == 0:
        return []
    new_word = word_starts[tokens[positions]]
    new_word[1:] |= np.diff(positions) > 1
    new_word[0] = True
    return np.split(positions, np.flatnonzero(new_word)[1:])


def choose_whole_words(words: List[np.ndarray], budget: int, rng) -> List[np.ndarray]:
    """BERT's whole-word masking: words in random order, each taken if it still fits the budget."""
    chosen, n = [], 0
    for w in rng.permutation(len(words)):
        if n + len(words[w]) <= budget:
            chosen.append(words[w])
            n += len(words[w])
    return chosen


def choose_spans(words: List[np.ndarray], budget: int, span_lengths: np.ndarray, rng) -> List[np.ndarray]:
    """SpanBERT: spans of ℓ whole words (ℓ ~ span_lengths) at random word starts, non-overlapping,
    until the budget is met (the last span may overshoot it, as in SpanBERT)."""
    taken = np.zeros(len(words), dtype=bool)
    chosen, n = [], 0
    for _ in range(MAX_SPAN_ATTEMPTS * budget):
        if n >= budget or len(words) == 0:
            break
        length = rng.choice(len(span_lengths), p=span_lengths) + 1
        start = rng.integers(len(words))
        stop = min(start + length, len(words))
        if taken[start:stop].any():
            continue
        taken[start:stop] = True
        chosen.append(np.concatenate(words[start:stop]))
        n += len(chosen[-1])
    return chosen


class MaskedPairDataset(BaseWrapperDataset):
    """Masks the items of an NspPairDataset and collates them into mlm_nsp batches:
    net_input.src_tokens (B, T), target (B, T; padding where nothing is predicted), nsp_target (B,)."""

    def __init__(self, pairs, masker: Masker, dictionary, seed: int):
        super().__init__(pairs)
        self.masker, self.seed, self.epoch = masker, seed, 1
        self.pad, self.specials = dictionary.pad(), np.array([dictionary.bos(), dictionary.eos(), dictionary.pad()])

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.epoch = epoch

    def __getitem__(self, index):
        item = self.dataset[index]
        tokens = item["tokens"].numpy()
        rng = np.random.default_rng((self.seed, self.epoch, index, _MASK_SALT))
        source, target = self.masker(tokens, ~np.isin(tokens, self.specials), rng)
        return {"id": index, "source": torch.from_numpy(source), "target": torch.from_numpy(target),
                "nsp_label": item["nsp_label"]}  # fmt: skip

    def ordered_indices(self):
        """Shuffled by the seed, then sorted by size (as fairseq's masked_lm task)."""
        shuffle = np.random.default_rng((self.seed, _MASK_SALT)).permutation(len(self))
        return shuffle[np.argsort(self.sizes[shuffle], kind="mergesort")]

    def collater(self, samples):
        if len(samples) == 0:
            return {}
        src_tokens = data_utils.collate_tokens([s["source"] for s in samples], self.pad)
        return {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": sum(len(s["source"]) for s in samples),
            "net_input": {
                "src_tokens": src_tokens,
                "src_lengths": torch.LongTensor([len(s["source"]) for s in samples]),
            },
            "target": data_utils.collate_tokens([s["target"] for s in samples], self.pad),
            "nsp_target": torch.LongTensor([s["nsp_label"] for s in samples]),
        }

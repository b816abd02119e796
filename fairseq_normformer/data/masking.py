"""BERT's masked-LM corruption (Devlin et al. 2019, §3.1), by token, whole word or span.

A *unit* is what gets chosen and corrupted as one: a token; a whole word (a SentencePiece piece
starting with '▁' and the pieces that follow it); or a span of whole words (SpanBERT, Joshi et al.
2020, §3.1; spans never cross [SEP], and the last one stops where the budget is met). A budget of
``mask_prob`` of the maskable tokens is chosen; each chosen unit then becomes [MASK] (80%), random
tokens (10%) or stays itself (10%), and every token of it is a prediction target. Special symbols
([CLS], [SEP], padding) are never maskable. ``span_boundaries`` gives, per target, the positions
around its run of targets, for SpanBERT's span boundary objective.
"""
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, data_utils

WORD_START = "\u2581"  # SentencePiece's word-boundary marker '▁'
_MASK_SALT = 2  # a random stream apart from the pair construction's (nsp_pairs uses 0 and 1)


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
        budget = min(len(positions), max(1, int(self.cfg.mask_prob * len(positions) + rng.random())))
        units = self.choose_units(tokens, positions, budget, rng)
        source, target = tokens.copy(), np.full_like(tokens, self.pad)
        for unit in units:
            target[unit] = tokens[unit]
            self.corrupt(source, unit, rng)
        return source, target

    def choose_units(self, tokens, positions, budget, rng) -> List[np.ndarray]:
        if self.cfg.spans:
            return choose_spans(positions, self.word_starts[tokens[positions]], budget, self.span_lengths, rng)
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


def choose_spans(positions, starts_word, budget: int, span_lengths: np.ndarray, rng) -> List[np.ndarray]:
    """SpanBERT's span masking (Joshi et al. 2020, §3.1; its masking.py, PairWithSpanMaskingScheme.mask)
    over all maskable ``positions`` (A and B together) with one ``budget``: until ``budget`` tokens
    are selected, draw ℓ ~ span_lengths words and an anchor among the unselected tokens; from the
    start of the anchor's word select the unselected tokens of ℓ whole words, fewer where the
    segment ends ([SEP]), stopping inside the span once the budget is reached (as SpanBERT).
    ``starts_word`` (len(positions),) says which tokens begin a word. The units are the maximal runs
    of selected tokens (SpanBERT merges touching spans), so each is corrupted as one and its
    neighbours are unmasked."""
    if budget == 0:
        return []
    segment_starts = np.diff(positions, prepend=-2) > 1  # a gap ([CLS]/[SEP]) opens a segment
    starts_word = starts_word | segment_starts
    word_starts = np.append(np.flatnonzero(starts_word), len(positions))  # offsets; the last is the end
    word_of = np.cumsum(starts_word) - 1
    segment_end = np.append(np.flatnonzero(segment_starts), len(positions))[np.cumsum(segment_starts)]
    length_cdf = np.cumsum(span_lengths)
    selected, n = np.zeros(len(positions), dtype=bool), 0
    while n < budget:
        n_words = np.searchsorted(length_cdf, rng.random(), side="right") + 1
        free = np.flatnonzero(~selected)
        anchor = free[rng.integers(len(free))]
        start = word_starts[word_of[anchor]]
        stop = min(word_starts[min(word_of[anchor] + n_words, len(word_starts) - 1)], segment_end[anchor])
        new = start + np.flatnonzero(~selected[start:stop])[: budget - n]
        selected[new] = True
        n += len(new)
    chosen = positions[selected]
    return np.split(chosen, np.flatnonzero(np.diff(chosen) > 1) + 1)  # runs never cross [SEP]: it is a gap


def span_boundaries(target: np.ndarray, pad: int) -> np.ndarray:
    """(T,) -> (T, 2): for each target position, the positions just before and after its maximal run
    of targets, x_{s-1} and x_{e+1} of SpanBERT's span boundary objective (0 elsewhere)."""
    is_target = target != pad
    edges = np.flatnonzero(np.diff(is_target.astype(np.int8), prepend=0, append=0))
    boundaries = np.zeros((len(target), 2), dtype=np.int64)
    for s, e in zip(edges[::2], edges[1::2]):  # the run is [s, e)
        boundaries[s:e] = (s - 1, e)
    return boundaries


class MaskedPairDataset(BaseWrapperDataset):
    """Masks the items of an NspPairDataset (or ContiguousTextDataset) and collates them into mlm_nsp
    batches: net_input.src_tokens (B, T), target (B, T; padding where nothing is predicted),
    span_boundaries (B, T, 2; see ``span_boundaries``) and, for sentence pairs, nsp_target (B,)."""

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
        boundaries = span_boundaries(target, self.pad)
        masked = {"id": index, "source": torch.from_numpy(source), "target": torch.from_numpy(target),
                  "span_boundaries": torch.from_numpy(boundaries)}  # fmt: skip
        if "nsp_label" in item:
            masked["nsp_label"] = item["nsp_label"]
        return masked

    def ordered_indices(self):
        """Shuffled by the seed, then sorted by size (as fairseq's masked_lm task)."""
        shuffle = np.random.default_rng((self.seed, _MASK_SALT)).permutation(len(self))
        return shuffle[np.argsort(self.sizes[shuffle], kind="mergesort")]

    def collater(self, samples):
        if len(samples) == 0:
            return {}
        src_tokens = data_utils.collate_tokens([s["source"] for s in samples], self.pad)
        batch = {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": sum(len(s["source"]) for s in samples),
            "net_input": {
                "src_tokens": src_tokens,
                "src_lengths": torch.LongTensor([len(s["source"]) for s in samples]),
            },
            "target": data_utils.collate_tokens([s["target"] for s in samples], self.pad),
            "span_boundaries": collate_boundaries([s["span_boundaries"] for s in samples], src_tokens.size(1)),
        }
        if "nsp_label" in samples[0]:
            batch["nsp_target"] = torch.LongTensor([s["nsp_label"] for s in samples])
        return batch


def collate_boundaries(boundaries: List[torch.Tensor], width: int) -> torch.Tensor:
    """(T_i, 2) each -> (B, width, 2), zeros where padded."""
    batch = boundaries[0].new_zeros(len(boundaries), width, 2)
    for row, b in zip(batch, boundaries):
        row[: len(b)] = b
    return batch

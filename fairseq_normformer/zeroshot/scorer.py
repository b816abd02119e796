"""Log-likelihoods of text under a fairseq causal LM trained on SentencePiece pieces.

Text is encoded as the corpus was (SentencePiece pieces, then the fairseq dictionary), and every
sequence starts with the dictionary's ``</s>``: fairseq's language-modeling data puts ``</s>`` at
the end of each line and predicts the first token of a block from it, so ``</s>`` is the model's
beginning-of-text. A continuation's score is ``sum_t log p(c_t | </s>, context, c_<t)``.
"""
import argparse
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

import sentencepiece as spm
import torch
from fairseq import checkpoint_utils, utils
from fairseq.data import Dictionary

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the fairseq user dir of this plugin
# A checkpoint's dictionary and a SentencePiece model match when (nearly) every dictionary
# symbol is a piece of the model; fairseq-preprocess pads dictionaries with 'madeupword' fillers.
MIN_KNOWN_SYMBOLS = 0.95


@dataclass
class ContinuationScore:
    logprob: float  # sum of the continuation tokens' log-probabilities
    num_tokens: int
    is_greedy: bool  # every continuation token is the model's most likely next token


class LMScorer:
    """Scores (context, continuation) pairs in length-sorted batches of at most ``max_tokens``
    tokens; contexts longer than the model's positions lose their earliest tokens."""

    def __init__(self, model, dictionary: Dictionary, sp: spm.SentencePieceProcessor, max_tokens=4096, info=None):
        self.model = model.eval()
        self.info = info or {}  # checkpoint facts for reports (see checkpoint_info)
        self.dictionary = dictionary
        self.sp = sp
        self.max_positions = _max_positions(model)
        if max_tokens < self.max_positions:
            raise ValueError(f"max_tokens ({max_tokens}) must be at least the model's positions ({self.max_positions})")
        self.max_tokens = max_tokens

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # --- text <-> tokens ---------------------------------------------------------------------
    def encode(self, text: str) -> List[int]:
        pieces = self.sp.encode(text, out_type=str)
        return [self.dictionary.index(p) for p in pieces]

    def decode(self, tokens: Sequence[int]) -> str:
        return self.sp.decode_pieces([self.dictionary[t] for t in tokens if t != self.dictionary.eos()])

    def encode_pair(self, context: str, continuation: str) -> Tuple[List[int], List[int]]:
        """Tokens of the context and of the continuation, split from the tokens of the whole
        text (as lm-eval does), so a continuation that does not start at a word boundary is
        tokenized as it would be in running text. Trailing spaces of the context move to the
        continuation."""
        stripped = context.rstrip()
        continuation = context[len(stripped) :] + continuation
        whole = self.encode(stripped + continuation)
        context_tokens = self.encode(stripped) if stripped else []
        continuation_tokens = whole[len(context_tokens) :]
        if not continuation_tokens:
            raise ValueError(f"continuation {continuation!r} encodes to no tokens after context {context!r}")
        return context_tokens, continuation_tokens

    # --- scoring -----------------------------------------------------------------------------
    def score(self, pairs: Sequence[Tuple[str, str]]) -> List[ContinuationScore]:
        """Scores of ``continuation`` after ``context`` for each (context, continuation)."""
        return self.score_tokens([self.encode_pair(ctx, cont) for ctx, cont in pairs])

    @torch.no_grad()
    def score_tokens(self, pairs: Sequence[Tuple[List[int], List[int]]]) -> List[ContinuationScore]:
        sequences = [self._sequence(ctx, cont) for ctx, cont in pairs]
        scores = [None] * len(pairs)
        for batch in self._batches(sequences):
            for i, score in zip(batch, self._score_batch([sequences[i] for i in batch])):
                scores[i] = score
        return scores

    def _sequence(self, context: List[int], continuation: List[int]) -> Tuple[List[int], int]:
        """(``</s>`` + context + continuation, cut to the model's positions + 1, continuation length)."""
        if len(continuation) > self.max_positions:
            raise ValueError(
                f"a continuation of {len(continuation)} tokens does not fit the model's {self.max_positions} "
                f"positions: {self.decode(continuation)!r}"
            )
        tokens = [self.dictionary.eos()] + context + continuation
        return tokens[-(self.max_positions + 1) :], len(continuation)

    def _batches(self, sequences) -> List[List[int]]:
        """Indices grouped longest first so that (batch size x longest input) <= max_tokens."""
        batches = []
        for i in sorted(range(len(sequences)), key=lambda i: -len(sequences[i][0])):
            if batches and (len(batches[-1]) + 1) * (len(sequences[batches[-1][0]][0]) - 1) <= self.max_tokens:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _score_batch(self, sequences) -> List[ContinuationScore]:
        lengths = [len(tokens) - 1 for tokens, _ in sequences]
        padded = torch.full((len(sequences), max(lengths) + 1), self.dictionary.pad(), dtype=torch.long)
        for row, (tokens, _) in enumerate(sequences):
            padded[row, : len(tokens)] = torch.tensor(tokens)
        padded = padded.to(self.device)
        inputs, targets = padded[:, :-1], padded[:, 1:]  # (B, T): right padding leaves real positions untouched
        lprobs = self.model.get_normalized_probs(self.model(inputs), log_probs=True).float()  # (B, T, V)
        target_lprobs = lprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
        greedy = lprobs.argmax(-1).eq(targets)  # (B, T)
        scores = []
        for row, (length, (_, n)) in enumerate(zip(lengths, sequences)):
            span = slice(length - n, length)  # the continuation's positions in the targets
            scores.append(
                ContinuationScore(target_lprobs[row, span].sum().item(), n, bool(greedy[row, span].all().item()))
            )
        return scores

    def rolling_logprob(self, text: str) -> float:
        """log p(text) as lm-eval's ``loglikelihood_rolling`` defines it: the tokens are predicted
        in chunks of the model's positions, each token once, each chunk after as many preceding
        tokens as fit (the first after ``</s>``)."""
        tokens = self.encode(text)
        chunks = [(tokens[:start], tokens[start : start + self.max_positions])
                  for start in range(0, len(tokens), self.max_positions)]  # fmt: skip
        return sum(score.logprob for score in self.score_tokens(chunks))

    # --- generation --------------------------------------------------------------------------
    @torch.no_grad()
    def generate_greedy(self, context: str, until: Sequence[str] = (), max_new_tokens: int = 256) -> str:
        """Greedy continuation of ``context``, stopped at ``</s>``, at ``max_new_tokens``, at the
        model's last position, or before the first of the ``until`` strings."""
        tokens = ([self.dictionary.eos()] + self.encode(context))[-self.max_positions :]
        prefix_length, incremental_state = len(tokens), {}
        for step in range(1, self.max_positions + 1):  # fairseq's decoder reads one new token per call
            if len(tokens) - prefix_length >= max_new_tokens:
                break
            net_output = self.model.decoder(
                torch.tensor([tokens[:step]], device=self.device), incremental_state=incremental_state
            )
            if step < len(tokens):
                continue
            next_token = self.model.get_normalized_probs(net_output, log_probs=True)[0, -1].argmax().item()
            if next_token == self.dictionary.eos():
                break
            tokens.append(next_token)
            text = self._text_after(tokens, prefix_length)
            stops = [text.index(stop) for stop in until if stop in text]
            if stops:
                return text[: min(stops)]
        return self._text_after(tokens, prefix_length)

    def _text_after(self, tokens: List[int], prefix_length: int) -> str:
        """The text of tokens[prefix_length:], with the space that joins it to the prefix."""
        prefix = self.decode(tokens[:prefix_length])
        return self.decode(tokens)[len(prefix) :]


def _max_positions(model) -> int:
    positions = model.max_positions()
    return positions[0] if isinstance(positions, tuple) else positions


def check_vocabulary(dictionary: Dictionary, sp: spm.SentencePieceProcessor, spm_model) -> None:
    """Fail loudly when the SentencePiece model is not the one the checkpoint's data was built with."""
    symbols = [s for s in dictionary.symbols[dictionary.nspecial :] if not s.startswith("madeupword")]
    known = sum(sp.piece_to_id(s) != sp.unk_id() for s in symbols)
    if not symbols or known / len(symbols) < MIN_KNOWN_SYMBOLS:
        raise ValueError(
            f"the SentencePiece model {spm_model} does not match the checkpoint's dictionary: only {known} of "
            f"{len(symbols)} dictionary symbols are pieces of it; pass the spm.model the data was built with"
        )


def checkpoint_info(state: dict) -> dict:
    """What Table 1 reports about a model besides accuracy, read from its checkpoint."""
    cfg = state["cfg"]
    return {
        "arch": cfg.model.get("arch", cfg.model.get("_name")),
        "lr": float(cfg.optimization.lr[0]),
        "updates": state["optimizer_history"][-1].get("num_updates"),
        "train_seconds": state.get("extra_state", {}).get("previous_training_time"),
        "devices": cfg.distributed_training.distributed_world_size,
        "cpu": bool(cfg.common.cpu),
    }


def load_scorer(
    checkpoint, spm_model, data=None, user_dir=PACKAGE_DIR, device="cpu", fp16=False, max_tokens=4096
) -> LMScorer:
    """Load a fairseq checkpoint (``--user-dir`` modules imported first) and its SentencePiece model.
    ``data`` overrides the checkpoint's data directory, where the dictionary (dict.txt) is read."""
    for path, what in ((checkpoint, "checkpoint"), (spm_model, "SentencePiece model")):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{what} not found: {path}")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but this torch has no CUDA device; use device cpu")
    utils.import_user_module(argparse.Namespace(user_dir=str(user_dir)))
    overrides = {"data": str(data)} if data is not None else {}
    state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint), overrides)
    if state.get("cfg") is None:
        raise ValueError(f"{checkpoint} has no config (a checkpoint from fairseq older than 0.10?)")
    try:
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], state=state)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"loading {checkpoint}: {err} (pass data= / --data with the directory holding the checkpoint's dict.txt)"
        ) from err
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    check_vocabulary(task.target_dictionary, sp, spm_model)
    model = models[0].to(device)
    if fp16:
        model = model.half()
    parameters = sum(p.numel() for p in model.parameters())
    info = dict(checkpoint_info(state), checkpoint=str(checkpoint), parameters=parameters)
    logger.info(f"loaded {checkpoint}: {info}")
    return LMScorer(model, task.target_dictionary, sp, max_tokens=max_tokens, info=info)

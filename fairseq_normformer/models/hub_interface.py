"""The hub interfaces ``from_pretrained`` returns for the masked LMs (docs/masked_lm.md, "From Python").

``NormFormerRobertaHubInterface`` is fairseq's RobertaHubInterface (encode, decode, extract_features,
predict, ...) with ``fill_mask`` returning ``topk`` candidates, each with its own probability.
fairseq's decodes the top-k indices with ``Dictionary.string``, which drops ``</s>`` and ``<s>``, but
keeps the probabilities of all k: when a special token is among the top k, fewer candidates come back
and each carries the probability of the one before it. The fix lives here, not in fixes/, because it
only concerns the models of this package: fairseq's own RobertaModel keeps fairseq's behaviour.

``NormFormerBertHubInterface`` builds what ``mlm_nsp`` trains on (data/nsp_pairs.py):
``<s> A </s> B </s>`` (one ``</s>`` between the segments, not RoBERTa's two), its segment ids, and the
next-sentence prediction.

Each model class names its interface (``hub_interface_class``), so this module imports no model.
``load`` is fairseq's ``hub_utils.from_pretrained`` for every ``from_pretrained`` of this package (the LM's and
the masked LMs'), with one INFO line naming the model, its parameters and its normalization where fairseq's
logs the whole config, several KB on one line, whose ``decoder_normalize_before: False`` a Pre-LN
normformer_lm never reads (its layers follow ``--post-ln``).
"""
import logging
import os

import numpy as np
import torch
from fairseq import hub_utils, utils
from fairseq.models.roberta.hub_interface import RobertaHubInterface
from torch import Tensor

from ..checks import BadInput
from ..modules.layer_config import LAYER_SWITCHES
from ..data.nsp_pairs import segment_ids

logger = logging.getLogger(__name__)

MASK = "<mask>"


class NormFormerRobertaHubInterface(RobertaHubInterface):
    def fill_mask(self, masked_input: str, topk: int = 5) -> list:
        """[(filled text, probability, token)] of the ``topk`` most probable tokens at the one ``<mask>``,
        special symbols (``<s> <pad> </s> <unk> <mask>``) left out; each probability is the token's own,
        from the softmax over the whole vocabulary."""
        if masked_input.count(MASK) != 1:
            raise BadInput(f"fill_mask: put exactly one {MASK} in the input, e.g. 'Return the {MASK} of x'")
        tokens = self.encode_masked(masked_input)
        with utils.model_eval(self.model), torch.no_grad():
            logits, _ = self.model(tokens.unsqueeze(0).to(device=self.device))
        probs = logits[0, tokens.eq(self.task.mask_idx)][0].softmax(dim=-1)
        values, indices = probs.masked_fill(self.special_symbols(probs.size(0)), -1.0).topk(topk)
        return [self.filled(masked_input, int(i), float(p)) for p, i in zip(values, indices)]

    def encode_masked(self, masked_input: str) -> Tensor:
        """``<s> pieces </s>`` with ``<mask>`` kept as the mask symbol (as fairseq's fill_mask encodes it)."""
        spans = [self.bpe.encode(span.rstrip()) for span in masked_input.split(MASK)]
        line = f"<s> {f' {MASK} '.join(spans).strip()} </s>"
        return self.task.source_dictionary.encode_line(line, append_eos=False, add_if_not_exist=False).long()

    def special_symbols(self, vocab_size: int) -> Tensor:
        """(V,) bool: the dictionary's special symbols and the mask symbol."""
        special = torch.zeros(vocab_size, dtype=torch.bool)
        special[: self.task.source_dictionary.nspecial] = True
        special[self.task.mask_idx] = True
        return special.to(self.device)

    def filled(self, masked_input: str, index: int, prob: float) -> tuple:
        """(masked_input with the token in place of <mask>, prob, token); a word-initial piece keeps its space."""
        piece = self.task.source_dictionary[index]
        token = (" " if piece.startswith("\u2581") else "") + self.bpe.decode(piece)
        mask = f" {MASK}" if f" {MASK}" in masked_input else MASK
        return masked_input.replace(mask, token), prob, token


class NormFormerBertHubInterface(NormFormerRobertaHubInterface):
    def encode(self, sentence: str, *addl_sentences, no_separator=True) -> Tensor:
        """``<s> A </s>`` or ``<s> A </s> B </s>``, as mlm_nsp trains (BERT's ``[CLS] A [SEP] B [SEP]``)."""
        if len(addl_sentences) > 1 or not no_separator:
            raise BadInput("BERT's input is one segment or two (A, B), each ended by a single </s>")
        return super().encode(sentence, *addl_sentences, no_separator=True)

    def decode(self, tokens: Tensor):
        """The text of each segment of ``<s> A </s> B </s>`` (a string for one segment, else a list)."""
        d = self.task.source_dictionary
        tokens = tokens.cpu().numpy()
        tokens = tokens[1:] if tokens[0] == d.bos() else tokens
        ends = np.flatnonzero(tokens == d.eos()) + 1
        segments = [self.bpe.decode(d.string(s)) for s in np.split(tokens, ends) if len(s)]
        return segments[0] if len(segments) == 1 else segments

    def segment_ids(self, tokens: Tensor) -> Tensor:
        """The segment (token type) ids the model adds to ``tokens``: 0 for ``<s> A </s>``, 1 for ``B </s>``."""
        batch = tokens if tokens.dim() == 2 else tokens.unsqueeze(0)
        ids = segment_ids(batch, self.task.source_dictionary.eos())
        return ids if tokens.dim() == 2 else ids[0]

    def predict_next_sentence(self, sentence_a: str, sentence_b: str, return_logits: bool = False) -> Tensor:
        """(2,) log-probabilities (or logits) that B follows A, in the head's order: IS_NEXT, NOT_NEXT."""
        if self.model.encoder.nsp_head is None:
            raise BadInput("this model has no next-sentence head (pre-trained with --no-nsp)")
        tokens = self.encode(sentence_a, sentence_b)
        with utils.model_eval(self.model):
            _, extra = self.model(tokens.unsqueeze(0).to(device=self.device))
        logits = extra["nsp_logits"][0]
        return logits if return_logits else logits.log_softmax(dim=-1)


# The depth schemes (models/options.py) the one line names when they are set: --flag, or --flag VALUE.
SCHEME_OPTIONS = ("post_ln_layers", "reordered_norm", "rezero", "ln_scaling", "dyt_alpha")


def normalization(model_cfg) -> str:
    """The layers' normalization as the flags set it, e.g. "Pre-LN, layernorm, --scale-attn --scale-fc --scale-heads"."""
    get = lambda name, default=False: utils.safe_getattr(model_cfg, name, default)  # noqa: E731
    switches = [op.flag for op in LAYER_SWITCHES if op.field != "post_ln" and get(op.field)]
    for name in SCHEME_OPTIONS:
        value, flag = get(name, None), "--" + name.replace("_", "-")
        if value:
            switches.append(flag if value is True else f"{flag} {value}")
    scheme = ["Post-LN" if get("post_ln") else "Pre-LN", str(get("norm_type", "layernorm"))]
    return ", ".join(scheme + ([" ".join(switches)] if switches else []))


def load(model_class, model_name_or_path, checkpoint_file, data_name_or_path, **kwargs) -> dict:
    """fairseq's hub_utils.from_pretrained, logging one line: the model, its parameters, its normalization."""
    x = hub_utils.from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path,
                                  archive_map=model_class.hub_models(), **kwargs)  # fmt: skip
    model_cfg = x["args"].model
    arch = utils.safe_getattr(model_cfg, "_name", None) or utils.safe_getattr(model_cfg, "arch", "?")
    params = sum(p.numel() for p in x["models"][0].parameters())
    logger.info(f"loaded {arch} from {os.path.join(model_name_or_path, checkpoint_file)}: {params:,} parameters, "
                f"{normalization(model_cfg)}")  # fmt: skip
    return x

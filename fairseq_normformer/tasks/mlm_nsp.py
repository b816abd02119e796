"""``mlm_nsp``: BERT's pre-training task, masked LM plus next-sentence prediction.

Reads BERT-format text (one sentence per line, an empty line between documents) binarized by
``fairseq-preprocess --only-source``, and builds ``[CLS] A [SEP] B [SEP]`` examples
(``data/nsp_pairs.py``) masked as BERT (``data/masking.py``). Symbols: [CLS] = ``<s>``,
[SEP] = ``</s>``, [MASK] = ``<mask>`` (appended to dict.txt's symbols, as fairseq's ``masked_lm``
and ``sentence_prediction`` tasks do, so checkpoints fine-tune through ``sentence_prediction``).
With ``--no-nsp`` the examples are single segments ``[CLS] text [SEP]`` and there is no NSP label.
Every example is a function of (--seed, epoch, index): resuming and multi-worker loading rebuild
exactly the same batches.
"""
import logging
import os
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

from ..checks import DataNeeds
from ..instrumentation.task_mixin import AnalysisOptions, AnalysisTaskMixin
from ..data.masking import MaskedPairDataset, Masker, MaskingConfig
from ..data.nsp_pairs import NEGATIVE_STRATEGIES, ContiguousTextDataset, NspPairDataset, check_tokens_per_sample

logger = logging.getLogger(__name__)

MASK_SYMBOL = "<mask>"


@dataclass
class MlmNspConfig(AnalysisOptions, FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "fairseq-preprocess output of BERT-format text; "
                                                 "colon-separated directories are used one per epoch"})  # fmt: skip
    tokens_per_sample: int = field(default=512, metadata={"help": "max tokens of [CLS] A [SEP] B [SEP]"})
    short_seq_prob: float = field(
        default=0.1, metadata={"help": "probability that a document's examples target a random shorter length (BERT)"}
    )
    nsp_negatives: ChoiceEnum(NEGATIVE_STRATEGIES) = field(
        default="random",
        metadata={"help": "NOT_NEXT pairs: B from another document (BERT), from a non-adjacent place of "
                  "the same document (LaMBERT), or A and B swapped (sentence-order prediction)"},
    )  # fmt: skip
    no_nsp: bool = field(
        default=False,
        metadata={"help": "no next-sentence prediction (BERT's Table 5 'No NSP', SpanBERT, RoBERTa): single-segment "
                  "examples of contiguous text, and normformer_bert builds no pooler or NSP head"},
    )  # fmt: skip
    mask_prob: float = field(default=0.15, metadata={"help": "fraction of tokens to predict"})
    leave_unmasked_prob: float = field(default=0.1, metadata={"help": "of those, fraction left unchanged"})
    random_token_prob: float = field(default=0.1, metadata={"help": "of those, fraction replaced by a random token"})
    mask_whole_words: bool = field(
        default=False, metadata={"help": "mask whole words (a SentencePiece '▁' piece and its continuation pieces)"}
    )
    span_masking: bool = field(
        default=False, metadata={"help": "mask spans of whole words (SpanBERT), lengths ~ clipped Geometric(p)"}
    )
    span_geometric_p: float = field(default=0.2, metadata={"help": "p of SpanBERT's span-length distribution"})
    span_max_words: int = field(default=10, metadata={"help": "longest span, in words"})
    seed: int = II("common.seed")


@register_task("mlm_nsp", dataclass=MlmNspConfig)
class MlmNspTask(AnalysisTaskMixin, FairseqTask):
    cfg: MlmNspConfig
    data_needs = DataNeeds(dictionary="dict.txt", splits=("{split}",))  # read by setup_task, load_dataset

    def __init__(self, cfg: MlmNspConfig, dictionary: Dictionary):
        super().__init__(cfg)
        if MASK_SYMBOL not in dictionary.indices:
            raise ValueError(f"the dictionary has no {MASK_SYMBOL} symbol ([MASK]); load it with setup_task, "
                             "which appends it to dict.txt's symbols")  # fmt: skip
        check_tokens_per_sample(cfg.tokens_per_sample)
        self.dictionary = dictionary
        self.mask_idx = dictionary.index(MASK_SYMBOL)
        masking = MaskingConfig(
            mask_prob=cfg.mask_prob,
            leave_unmasked_prob=cfg.leave_unmasked_prob,
            random_token_prob=cfg.random_token_prob,
            whole_words=cfg.mask_whole_words,
            spans=cfg.span_masking,
            span_p=cfg.span_geometric_p,
            max_span_words=cfg.span_max_words,
        )
        self.masker = Masker(masking, dictionary, self.mask_idx)  # fails here, at setup, on a bad dictionary

    @classmethod
    def setup_task(cls, cfg: MlmNspConfig, **kwargs):
        paths = utils.split_paths(cfg.data)
        dictionary = Dictionary.load(os.path.join(paths[0], "dict.txt"))
        dictionary.add_symbol(MASK_SYMBOL)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        split_path = os.path.join(paths[(epoch - 1) % len(paths)], split)
        sentences = data_utils.load_indexed_dataset(split_path, self.dictionary, combine=combine)
        if sentences is None:
            raise FileNotFoundError(f"Dataset not found: {split} ({split_path})")
        check_sentences_end_with_eos(sentences, self.dictionary, split_path)
        examples_class = ContiguousTextDataset if self.cfg.no_nsp else NspPairDataset
        examples = examples_class(
            sentences,
            self.dictionary,
            self.cfg.tokens_per_sample,
            negatives=self.cfg.nsp_negatives,
            short_seq_prob=self.cfg.short_seq_prob,
            seed=self.cfg.seed,
        )
        self.datasets[split] = MaskedPairDataset(examples, self.masker, self.dictionary, self.cfg.seed)

    def max_positions(self):
        return self.cfg.tokens_per_sample

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary


def check_sentences_end_with_eos(sentences, dictionary, path, n_checked=100):
    """fairseq-preprocess ends every line with </s>; the pairing relies on it ([SEP], empty lines)."""
    for i in range(min(n_checked, len(sentences))):
        if len(sentences[i]) == 0 or sentences[i][-1] != dictionary.eos():
            raise ValueError(
                f"{path}: item {i} does not end with {dictionary.eos_word}; mlm_nsp expects "
                "fairseq-preprocess output of BERT-format text (one sentence per line)"
            )

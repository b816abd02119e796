"""``token_classification``: CoNLL-2003 named-entity recognition and any word tagging (BERT §5.3).
Reads DATA/{train,valid}.conll (``data/conll.py``); the labels are those of the training file,
sorted; a label of another split that training lacks is an error naming file and line, and so is a
training tag outside IOB1/BIO/IOBES unless ``--allow-other-tags``.

``--span-classification`` labels spans of up to ``--max-span-length`` words instead of words
(Jurafsky & Martin §11.5.2, ``data/spans.py``): the labels are NULL and the training file's entity
types, and spans may nest."""
from dataclasses import dataclass, field

from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from ..checks import BadInput
from ..data.conll import TaggedDataset, check_labels, check_tag_scheme, encode_sentence, read_conll
from ..data.spans import SpanDataset, span_labels
from ..models.token_heads import SpanClassificationHead, TokenClassificationHead
from .encoder_finetuning import EncoderFinetuningConfig, EncoderFinetuningTask

HEAD = "token_classification"
SPAN_HEAD = "span_classification"


@dataclass
class TokenClassificationConfig(EncoderFinetuningConfig):
    allow_other_tags: bool = field(
        default=False, metadata={"help": "train on tags other than O and B-, I-, E-, S- + type (IOB1, BIO, "
                                 "IOBES); the entity scores read a bare tag X as I-X, as conlleval"})  # fmt: skip
    span_classification: bool = field(default=False, metadata={"help": "label spans of words (J&M 11.5.2), not words"})
    max_span_length: int = field(default=8, metadata={"help": "span classification: longest span, in words"})
    span_pooling: ChoiceEnum(["attention", "mean"]) = field(
        default="attention", metadata={"help": "span classification: how a span's tokens are pooled"})  # fmt: skip
    span_decoding: ChoiceEnum(["best", "all"]) = field(
        default="best", metadata={"help": "span classification: keep the best non-overlapping spans, or all "
                                  "non-NULL spans (nested entities)"})  # fmt: skip


@register_task("token_classification", dataclass=TokenClassificationConfig)
class TokenClassificationTask(EncoderFinetuningTask):
    cfg: TokenClassificationConfig

    def __init__(self, cfg, dictionary):
        super().__init__(cfg, dictionary)
        train_file = self.data_file("train", ".conll")
        train = read_conll(train_file)
        if not cfg.allow_other_tags:
            check_tag_scheme(train, train_file)
        self.tags = sorted({tag for s in train for tag in s.tags})
        self.tag_ids = {tag: i for i, tag in enumerate(self.tags)}
        self.labels = span_labels(train) if cfg.span_classification else self.tags
        self.label_ids = {label: i for i, label in enumerate(self.labels)}
        self.head_name = SPAN_HEAD if cfg.span_classification else HEAD
        if cfg.span_classification and cfg.max_span_length < 1:
            raise BadInput(f"--max-span-length must be at least 1, not {cfg.max_span_length}")

    def build_head(self, model_args):
        if self.cfg.span_classification:
            return SpanClassificationHead(model_args.encoder_embed_dim, len(self.labels), model_args.pooler_dropout,
                                          self.cfg.span_pooling)  # fmt: skip
        return TokenClassificationHead(model_args.encoder_embed_dim, len(self.labels), model_args.pooler_dropout)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        self.datasets[split] = self.load_file(self.data_file(split, ".conll"), shuffle=split == "train")

    def load_file(self, path, shuffle=False):
        sentences = read_conll(path)
        check_labels(sentences, self.tags, path)
        encoded = [encode_sentence(s, self.encoder, self.tag_ids, self.cfg.max_seq_length) for s in sentences]
        if self.cfg.span_classification:
            return SpanDataset(encoded, self.dictionary.pad(), shuffle, self.cfg.seed, self.label_ids,
                               self.cfg.max_span_length)  # fmt: skip
        return TaggedDataset(encoded, self.dictionary.pad(), shuffle, self.cfg.seed)

"""What the fine-tuning tasks beyond GLUE share: the pre-training dictionary (plus ``<mask>``, as
``mlm_nsp`` and fairseq's ``masked_lm`` append it, so the embeddings match) and SentencePiece model,
and a head on the encoder registered in ``build_model`` (models/token_heads.py)."""
import logging
import os
from dataclasses import dataclass, field

from fairseq.data import Dictionary
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask
from omegaconf import II, MISSING

from ..checks import BadInput
from ..data.subwords import SubwordEncoder
from .mlm_nsp import MASK_SYMBOL

logger = logging.getLogger(__name__)


@dataclass
class EncoderFinetuningConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "directory of the task's files"})
    spm_model: str = field(default="", metadata={"help": "the pre-training SentencePiece model (default: DATA/spm.model)"})
    dict: str = field(default="", metadata={"help": "the pre-training dict.txt (default: DATA/dict.txt)"})
    max_seq_length: int = field(default=384, metadata={"help": "longest input, in pieces with [CLS] and [SEP]"})
    seed: int = II("common.seed")


class EncoderFinetuningTask(FairseqTask):
    head_name = ""  # the key of the task's head in model.token_heads

    def __init__(self, cfg, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary
        spm_model = cfg.spm_model or os.path.join(cfg.data, "spm.model")
        if not os.path.exists(spm_model):
            raise BadInput(f"SentencePiece model {spm_model} not found: pass --spm-model (the pre-training one)")
        self.encoder = SubwordEncoder(spm_model, dictionary)

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        path = cfg.dict or os.path.join(cfg.data, "dict.txt")
        if not os.path.exists(path):
            raise BadInput(f"dictionary {path} not found: pass --dict (the pre-training dict.txt)")
        dictionary = Dictionary.load(path)
        dictionary.add_symbol(MASK_SYMBOL)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary)

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if not hasattr(model, "register_token_head"):
            raise BadInput(f"--task {self.cfg._name} needs --arch normformer_roberta* or normformer_bert*")
        if self.cfg.max_seq_length > model.max_positions():
            raise BadInput(f"--max-seq-length {self.cfg.max_seq_length} exceeds the model's {model.max_positions()} "
                             "positions (--max-positions: the pre-training --tokens-per-sample)")  # fmt: skip
        model.register_token_head(self.head_name, self.build_head(model.args))
        return model

    def build_head(self, model_args):
        raise NotImplementedError

    def data_file(self, split: str, suffix: str) -> str:
        path = os.path.join(self.cfg.data, split + suffix)
        if not os.path.exists(path):
            raise BadInput(f"{split} split not found: {path}")
        return path

    def max_positions(self):
        return self.cfg.max_seq_length

    @property
    def source_dictionary(self):
        return self.dictionary

    target_dictionary = source_dictionary  # the criterions' padding index

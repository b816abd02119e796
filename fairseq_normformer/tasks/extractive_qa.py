"""``extractive_qa``: SQuAD v1.1 / v2.0 (BERT §4.2-4.3). Reads DATA/{train,valid}.json, tokenizes with
the pre-training SentencePiece model into ``[CLS] question [SEP] passage [SEP]`` windows
(``data/squad.py``) and adds a start/end head to the encoder. One dataset item is one question
with all its windows, so the criterion can score answers (EM/F1) during validation."""
from dataclasses import dataclass, field

from fairseq.tasks import register_task

from ..data.squad import QuestionsDataset, encode_squad, read_squad
from ..models.token_heads import TokenClassificationHead
from .encoder_finetuning import EncoderFinetuningConfig, EncoderFinetuningTask

HEAD = "extractive_qa"


@dataclass
class ExtractiveQAConfig(EncoderFinetuningConfig):
    doc_stride: int = field(default=128, metadata={"help": "passage pieces between the starts of two windows"})
    max_query_length: int = field(default=64, metadata={"help": "questions are cut to this many pieces"})
    max_answer_length: int = field(default=30, metadata={"help": "longest predicted answer, in pieces"})
    version_2_with_negative: bool = field(default=False, metadata={"help": "SQuAD v2.0: questions may have no answer"})
    null_threshold: float = field(
        default=0.0, metadata={"help": "v2.0: no answer when [CLS] score - best span score exceeds this "
                               "(normformer-predict qa --tune-threshold chooses it on dev)"})  # fmt: skip


@register_task("extractive_qa", dataclass=ExtractiveQAConfig)
class ExtractiveQATask(EncoderFinetuningTask):
    cfg: ExtractiveQAConfig
    head_name = HEAD

    def build_head(self, model_args):
        return TokenClassificationHead(model_args.encoder_embed_dim, 2, model_args.pooler_dropout)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        self.datasets[split] = self.load_file(self.data_file(split, ".json"), shuffle=split == "train")

    def load_file(self, path, shuffle=False):
        questions = read_squad(path, self.cfg.version_2_with_negative)
        encoded = encode_squad(questions, self.encoder, self.cfg.max_seq_length, self.cfg.doc_stride,
                               self.cfg.max_query_length)  # fmt: skip
        return QuestionsDataset(encoded, self.dictionary.pad(), shuffle, self.cfg.seed)

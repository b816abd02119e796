"""``token_classification``: CoNLL-2003 named-entity recognition and any word tagging (BERT §5.3).
Reads DATA/{train,valid}.conll (``data/conll.py``); the labels are those of the training file,
sorted; a label of another split that training lacks is an error naming file and line."""
from fairseq.tasks import register_task

from ..data.conll import TaggedDataset, check_labels, encode_sentence, read_conll
from ..models.token_heads import TokenClassificationHead
from .encoder_finetuning import EncoderFinetuningConfig, EncoderFinetuningTask

HEAD = "token_classification"


@register_task("token_classification", dataclass=EncoderFinetuningConfig)
class TokenClassificationTask(EncoderFinetuningTask):
    head_name = HEAD

    def __init__(self, cfg, dictionary):
        super().__init__(cfg, dictionary)
        train = read_conll(self.data_file("train", ".conll"))
        self.labels = sorted({tag for s in train for tag in s.tags})
        self.label_ids = {label: i for i, label in enumerate(self.labels)}

    def build_head(self, model_args):
        return TokenClassificationHead(model_args.encoder_embed_dim, len(self.labels), model_args.pooler_dropout)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        self.datasets[split] = self.load_file(self.data_file(split, ".conll"), shuffle=split == "train")

    def load_file(self, path, shuffle=False):
        sentences = read_conll(path)
        check_labels(sentences, self.labels, path)
        encoded = [encode_sentence(s, self.encoder, self.label_ids, self.cfg.max_seq_length) for s in sentences]
        return TaggedDataset(encoded, self.dictionary.pad(), shuffle, self.cfg.seed)

"""NormFormerTokenizer: SentencePiece pieces looked up in a fairseq dictionary, as fairseq-normformer's
corpora are encoded, so token ids are the checkpoint's. Standalone (sentencepiece + transformers):
shipped in every export directory.

``vocab.txt`` lists the dictionary's symbols in id order (``<s> <pad> </s> <unk>`` first, as fairseq).
Causal LMs start a text with ``</s>`` (their bos_token: fairseq's LM data ends each line with it);
encoders write ``<s> A </s>`` and ``<s> A </s> B </s>`` (BERT's [CLS] A [SEP] B [SEP]); translation
sources are ``A </s>`` (no bos), as fairseq's translation data. A translation model trained without
a joined dictionary has a second one, ``target_vocab.txt``: text is encoded with the source dictionary
(with the target one inside ``text_target=``), and ids are decoded with the target dictionary, so that
``decode()`` reads what the model generates.

Decoding is SentencePiece's (``<unk>`` reads `` ⁇ ``, and ``skip_special_tokens`` keeps it, as text it
stands for), except for the space SentencePiece writes before each text (the ``▁`` of its first piece):
only a text's start drops it. Ids that continue a text (a causal LM's new tokens, a fill-mask candidate)
keep it, so that HuggingFace pipelines, which decode the prompt and the new tokens apart and join them,
read what decoding the whole sequence reads.
"""
import shutil
from pathlib import Path

import sentencepiece as spm
from transformers import PreTrainedTokenizer

INSIDE_A_TEXT = "x"  # a piece without SentencePiece's space "▁": what follows it is not a text's start


def read_dictionary(vocab_file):
    """(symbols in id order, symbol -> id) of a vocab.txt, one symbol a line."""
    symbols, ids = Path(vocab_file).read_text(encoding="utf-8").split("\n")[:-1], {}
    for i, symbol in enumerate(symbols):
        ids.setdefault(symbol, i)  # fairseq's Dictionary.index: the first id of a symbol
    return symbols, ids


class NormFormerTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"spm_file": "spm.model", "vocab_file": "vocab.txt", "target_vocab_file": "target_vocab.txt"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, spm_file, vocab_file, target_vocab_file=None, bos_token="</s>", eos_token="</s>",
                 unk_token="<unk>", pad_token="<pad>", prepend_bos=True, append_eos=False, **kwargs):  # fmt: skip
        self.sp = spm.SentencePieceProcessor(model_file=str(spm_file))
        self.spm_file, self.vocab_file, self.target_vocab_file = spm_file, vocab_file, target_vocab_file
        self.source_symbols, self.source_ids = read_dictionary(vocab_file)
        self.target_symbols, self.target_ids = read_dictionary(target_vocab_file or vocab_file)  # decoding's
        self.ids = self.source_ids  # encoding's: the target dictionary's inside text_target=
        self.prepend_bos, self.append_eos = prepend_bos, append_eos  # translation sources: False, True
        super().__init__(bos_token=bos_token, eos_token=eos_token, unk_token=unk_token, pad_token=pad_token,
                         prepend_bos=prepend_bos, append_eos=append_eos, **kwargs)  # fmt: skip

    def _switch_to_input_mode(self):
        self.ids = self.source_ids

    def _switch_to_target_mode(self):
        self.ids = self.target_ids

    @property
    def vocab_size(self) -> int:
        return len(self.source_symbols)

    def get_vocab(self) -> dict:
        return dict(self.source_ids)

    def _tokenize(self, text, **kwargs):
        return self.sp.encode(text, out_type=str)

    def _convert_token_to_id(self, token):
        return self.ids.get(token, self.ids[str(self.unk_token)])

    def _convert_id_to_token(self, index):
        return self.target_symbols[index]

    def convert_tokens_to_string(self, tokens):
        return self.sp.decode_pieces(list(tokens))

    def _decode(self, token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=None, **kwargs):
        ids = [token_ids] if isinstance(token_ids, int) else [int(i) for i in token_ids]
        skipped = set(self.all_special_ids) - {self.unk_token_id} if skip_special_tokens else set()
        tokens = [self._convert_id_to_token(i) for i in ids if i not in skipped]
        if self._continues_a_text(ids):  # after a piece, SentencePiece keeps the spaces it drops at a text's start
            text = self.convert_tokens_to_string([INSIDE_A_TEXT, *tokens])[len(INSIDE_A_TEXT) :]
        else:
            text = self.convert_tokens_to_string(tokens)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        return self.clean_up_tokenization(text) if clean_up_tokenization_spaces else text

    def _continues_a_text(self, ids) -> bool:
        """Whether ``ids`` come from inside a text: this tokenizer starts texts with the bos token (causal
        LMs and encoders; a translation model's texts are whole), and ``ids`` do not, after left padding."""
        first = next((i for i in ids if i != self.pad_token_id), None)
        return self.prepend_bos and first != self.bos_token_id

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        end = [self.eos_token_id] if self.append_eos else []
        ids = ([self.bos_token_id] if self.prepend_bos else []) + token_ids_0 + end
        return ids if token_ids_1 is None else ids + token_ids_1 + end

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens=False):
        if already_has_special_tokens:
            return super().get_special_tokens_mask(token_ids_0, token_ids_1, already_has_special_tokens=True)
        end = [1] if self.append_eos else []
        mask = ([1] if self.prepend_bos else []) + [0] * len(token_ids_0) + end
        return mask if token_ids_1 is None else mask + [0] * len(token_ids_1) + end

    def save_vocabulary(self, save_directory, filename_prefix=None):
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        out = []
        files = ((self.spm_file, "spm.model"), (self.vocab_file, "vocab.txt"), (self.target_vocab_file, "target_vocab.txt"))
        for source, name in files:
            if source is None:
                continue
            target = Path(save_directory) / f"{prefix}{name}"
            if Path(source).resolve() != target.resolve():
                shutil.copyfile(source, target)
            out.append(str(target))
        return tuple(out)

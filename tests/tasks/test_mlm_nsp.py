"""The mlm_nsp task on the tiny standard-library corpus and on bad input."""
import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, indexed_dataset
from fairseq.tasks.sentence_prediction import SentencePredictionTask
from omegaconf import OmegaConf

from fairseq_normformer.data.nsp_pairs import IS_NEXT, NOT_NEXT
from fairseq_normformer.tasks.mlm_nsp import MlmNspConfig, MlmNspTask


def task_cfg(data, **overrides):
    return OmegaConf.structured(MlmNspConfig(data=str(data), tokens_per_sample=64, seed=1, **overrides))


def test_batches_from_the_corpus(tiny_bert_corpus):
    task = MlmNspTask.setup_task(task_cfg(tiny_bert_corpus.data_bin, nsp_negatives="same-document"))
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    itr = task.get_batch_iterator(dataset, max_sentences=8, seed=1, epoch=1).next_epoch_itr(shuffle=False)
    d, n_rows, n_next = task.source_dictionary, 0, 0
    for batch in itr:
        tokens, target = batch["net_input"]["src_tokens"], batch["target"]
        assert tokens.shape == target.shape and tokens.size(1) <= 64
        assert (tokens[:, 0] == d.bos()).all()
        assert (tokens.eq(d.eos()).sum(dim=1) == 2).all()  # [CLS] A [SEP] B [SEP]
        assert (target.ne(d.pad()).sum(dim=1) >= 1).all()
        assert set(batch["nsp_target"].tolist()) <= {IS_NEXT, NOT_NEXT}
        n_rows += len(tokens)
        n_next += int((batch["nsp_target"] == IS_NEXT).sum())
    assert n_rows == len(dataset) and 0 < n_next < n_rows


def test_dictionary_matches_sentence_prediction(tiny_bert_corpus):
    """Fine-tuning through fairseq's sentence_prediction needs the same symbols at the same ids."""
    ours = MlmNspTask.setup_task(task_cfg(tiny_bert_corpus.data_bin)).source_dictionary
    theirs = SentencePredictionTask.load_dictionary(str(tiny_bert_corpus.data_bin / "dict.txt"))
    assert ours.symbols == theirs.symbols
    assert ours.index("<mask>") == len(ours) - 1


def test_a_dictionary_without_mask_is_an_error(tiny_bert_corpus):
    dictionary = Dictionary.load(str(tiny_bert_corpus.data_bin / "dict.txt"))
    with pytest.raises(ValueError, match="no <mask> symbol"):
        MlmNspTask(task_cfg(tiny_bert_corpus.data_bin), dictionary)


def test_tokens_per_sample_too_small_is_an_error_at_setup(tiny_bert_corpus):
    cfg = task_cfg(tiny_bert_corpus.data_bin)
    cfg.tokens_per_sample = 4
    with pytest.raises(ValueError, match="too small for"):
        MlmNspTask.setup_task(cfg)


def test_data_without_end_of_sentence_symbols_is_an_error(tmp_path, tiny_bert_corpus):
    """E.g. data binarized by something other than fairseq-preprocess: lines do not end with </s>."""
    (tmp_path / "dict.txt").write_text((tiny_bert_corpus.data_bin / "dict.txt").read_text())
    builder = indexed_dataset.make_builder(str(tmp_path / "train.bin"), impl="mmap", vocab_size=2000)
    for length in (5, 7, 3):
        builder.add_item(torch.IntTensor(np.arange(4, 4 + length)))
    builder.finalize(str(tmp_path / "train.idx"))
    task = MlmNspTask.setup_task(task_cfg(tmp_path))
    with pytest.raises(ValueError, match="does not end with </s>"):
        task.load_dataset("train")


def test_masking_options_reach_the_masker(tiny_bert_corpus):
    task = MlmNspTask.setup_task(
        task_cfg(tiny_bert_corpus.data_bin, span_masking=True, span_geometric_p=0.5, span_max_words=3, mask_prob=0.3)
    )
    assert task.masker.cfg.spans and task.masker.cfg.mask_prob == 0.3
    np.testing.assert_allclose(task.masker.span_lengths, np.array([4, 2, 1]) / 7)


def test_no_nsp_batches_are_single_segments_with_span_boundaries(tiny_bert_corpus):
    task = MlmNspTask.setup_task(task_cfg(tiny_bert_corpus.data_bin, no_nsp=True, span_masking=True))
    task.load_dataset("valid")
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=8, seed=1).next_epoch_itr(shuffle=False)
    d, n_runs = task.source_dictionary, 0
    for batch in itr:
        tokens, target, boundaries = batch["net_input"]["src_tokens"], batch["target"], batch["span_boundaries"]
        assert "nsp_target" not in batch and (tokens[:, 0] == d.bos()).all()
        assert (tokens.eq(d.eos()).sum(dim=1) == 1).all()  # [CLS] text [SEP]
        for row in range(len(tokens)):
            for i in target[row].ne(d.pad()).nonzero()[:, 0].tolist():
                before, after = boundaries[row, i].tolist()
                # x_{s-1} and x_{e+1}: the first tokens outside the run of targets that holds i
                assert before < i < after and target[row, before + 1 : after].ne(d.pad()).all()
                assert target[row, before] == d.pad() and target[row, after] == d.pad()
                n_runs += i == before + 1
    assert n_runs > 0

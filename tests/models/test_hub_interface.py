"""``from_pretrained`` of the masked LMs (docs/masked_lm.md, "From Python"): RoBERTa's fill_mask gives the
model's own top k with their own probabilities (issue 40), BERT's encode gives what mlm_nsp trains on,
and the NSP head and a classification head answer from the hub. References are computed from the
SentencePiece model, the dictionary, the training dataset and the model's logits directly."""
from argparse import Namespace

import pytest
import sentencepiece as spm
import torch
from fairseq.data import ListDataset

from fairseq_normformer.checks import BadInput
from fairseq_normformer.data.nsp_pairs import IS_NEXT, NspPairDataset
from fairseq_normformer.models import NormFormerBertModel, NormFormerRobertaModel
from fairseq_normformer.models.hub_interface import NormFormerBertHubInterface, NormFormerRobertaHubInterface, normalization

from ..conftest import TINY, TRAIN, USER_DIR, run_cli

A, B = "Return the value of the list.", "It is a copy of the object."


def load_hub(model_class, checkpoint, corpus):
    hub = model_class.from_pretrained(checkpoint.parent, checkpoint_file=checkpoint.name,
                                      data_name_or_path=str(corpus.data_bin),
                                      sentencepiece_model=str(corpus.spm_model))  # fmt: skip
    return hub.eval()


@pytest.fixture(scope="module")
def roberta(tiny_bert_corpus, tmp_path_factory):
    """A normformer_roberta after one update of fairseq's own masked_lm task."""
    save_dir = tmp_path_factory.mktemp("roberta")
    run_cli(["fairseq-train", tiny_bert_corpus.data_bin, "--user-dir", USER_DIR, "--task", "masked_lm",
             "--criterion", "masked_lm", "--arch", "normformer_roberta_base", *TINY, "--tokens-per-sample", "64",
             *TRAIN, "--max-update", "1", "--save-dir", save_dir, "--no-epoch-checkpoints"])  # fmt: skip
    return load_hub(NormFormerRobertaModel, save_dir / "checkpoint_last.pt", tiny_bert_corpus)


@pytest.fixture(scope="module")
def bert(swap_run, tiny_bert_corpus):
    return load_hub(NormFormerBertModel, swap_run[0], tiny_bert_corpus)


def pieces(corpus, text) -> list:
    return spm.SentencePieceProcessor(model_file=str(corpus.spm_model)).encode(text, out_type=str)


@pytest.mark.slow
def test_fill_mask_gives_the_top_k_non_special_tokens_with_their_own_probabilities(roberta, tiny_bert_corpus):
    assert type(roberta) is NormFormerRobertaHubInterface
    d = roberta.task.source_dictionary
    with torch.no_grad():  # </s> the most probable token, as in issue 40: fairseq's fill_mask then shifts the scores
        roberta.model.encoder.lm_head.bias[d.eos()] += 20.0
    symbols = ["<s>", *pieces(tiny_bert_corpus, "Return the"), "<mask>", *pieces(tiny_bert_corpus, "of it."), "</s>"]
    with torch.no_grad():
        logits, _ = roberta.model(torch.tensor([[d.index(s) for s in symbols]]))
    probs = logits[0, symbols.index("<mask>")].softmax(-1)
    ranked = probs.argsort(descending=True).tolist()
    special = {d.bos(), d.pad(), d.eos(), d.unk(), d.index("<mask>")}
    expected = [i for i in ranked if i not in special][:3]
    assert ranked[0] == d.eos()

    filled = roberta.fill_mask("Return the <mask> of it.", topk=3)
    assert [p for _, p, _ in filled] == pytest.approx([probs[i].item() for i in expected], rel=1e-5)
    assert [token.strip() for _, _, token in filled] == [d[i].lstrip("\u2581") for i in expected]
    assert [text for text, _, _ in filled] == [f"Return the{token} of it." for _, _, token in filled]


def test_roberta_extract_features_and_a_classification_head(roberta):
    tokens = roberta.encode(A)
    features = roberta.extract_features(tokens)
    assert features.shape == (1, len(tokens), 32)
    roberta.register_classification_head("topic", num_classes=3)
    head = roberta.model.classification_heads["topic"].eval()
    expected = head(features).log_softmax(-1)
    torch.testing.assert_close(roberta.predict("topic", tokens), expected)


def sentence(corpus, d, text) -> torch.Tensor:
    """A line of BERT-format text as fairseq-preprocess binarizes it (pieces, then </s>)."""
    return d.encode_line(" ".join(pieces(corpus, text)), append_eos=True, add_if_not_exist=False).long()


def test_bert_encode_is_the_mlm_nsp_training_input_with_its_segments(bert, tiny_bert_corpus):
    assert type(bert) is NormFormerBertHubInterface
    d = bert.task.source_dictionary
    lines = [sentence(tiny_bert_corpus, d, text) for text in (A, B)] + [torch.tensor([d.eos()])]
    lines += [sentence(tiny_bert_corpus, d, text) for text in ("A second document.", "Its second sentence.")]
    training = NspPairDataset(ListDataset(lines, [len(x) for x in lines]), d, 64, short_seq_prob=0.0)
    continuations = []
    for epoch in range(1, 20):  # the first document's example is A, B or a negative, redrawn each epoch
        training.set_epoch(epoch)
        continuations += [training[0]["tokens"]] if training[0]["nsp_label"] == IS_NEXT else []
    tokens = bert.encode(A, B)
    assert continuations and torch.equal(tokens, continuations[0])
    a_length, b_length = len(lines[0]) - 1, len(lines[1]) - 1
    assert bert.segment_ids(tokens).tolist() == [0] * (a_length + 2) + [1] * (b_length + 1)
    assert bert.decode(tokens) == [A, B]


def test_bert_next_sentence_prediction_from_the_hub(bert):
    encoder = bert.model.encoder
    features = bert.extract_features(bert.encode(A, B))
    expected = encoder.nsp_head(torch.tanh(encoder.pooler.dense(features[:, 0])))[0]
    torch.testing.assert_close(bert.predict_next_sentence(A, B, return_logits=True), expected)
    assert bert.predict_next_sentence(A, B).exp().sum().item() == pytest.approx(1.0)


def test_bad_hub_input_is_named(roberta, bert):
    with pytest.raises(BadInput, match="exactly one <mask>"):
        roberta.fill_mask("Return the value.")
    with pytest.raises(BadInput, match="one segment or two"):
        bert.encode(A, B, "A third.")


def test_the_loaded_line_names_the_depth_schemes_set():
    """from_pretrained's one line (hub_interface.load) names the schemes of models/options.py a checkpoint was
    trained with, as their flags, after the NormFormer operations."""
    cfg = Namespace(post_ln=False, norm_type="dyt", scale_attn=True, post_ln_layers="first:1", reordered_norm=False,
                    rezero=False, ln_scaling=True, dyt_alpha="0.8,0.2,0.2")  # fmt: skip
    assert normalization(cfg) == "Pre-LN, dyt, --scale-attn --post-ln-layers first:1 --ln-scaling --dyt-alpha 0.8,0.2,0.2"
    assert normalization(Namespace(post_ln=False, norm_type="layernorm", rezero=True)) == "Pre-LN, layernorm, --rezero"

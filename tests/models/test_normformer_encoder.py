"""normformer_roberta / normformer_bert: equal to fairseq's own RoBERTa with every switch off, the
NormFormer operations where the paper puts them, presets, BERT segments and fine-tuning heads."""
import argparse

import pytest
import torch
from fairseq import options
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.models.roberta import RobertaModel

from fairseq_normformer.models.normformer_bert import segment_ids

from .encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask, fake_task
from tests.conftest import fairseq_config


def fairseq_roberta(arch, dictionary):
    """fairseq's RobertaModel, built from the same flags."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["unused", "--task", "masked_lm", "--arch", arch] + TINY_ENCODER)
    return RobertaModel.build_model(fairseq_config(args).model, fake_task(dictionary))


@pytest.mark.parametrize(
    "ours, theirs", [("normformer_roberta", "roberta_base"), ("preln_roberta_base", "roberta_prenorm")]
)
def test_with_every_switch_off_equals_fairseq_roberta(ours, theirs):
    d = dictionary_with_mask()
    reference = fairseq_roberta(theirs, d).eval()
    model = build_encoder_model(ours, d).eval()
    model.load_state_dict(reference.state_dict())  # strict: the same parameters, by name and shape
    tokens = torch.randint(d.nspecial, len(d) - 1, (3, 11))
    tokens[1, 7:] = d.pad()
    masked = tokens.ne(d.pad())
    torch.testing.assert_close(model(tokens, masked_tokens=masked)[0], reference(tokens, masked_tokens=masked)[0],
                               atol=1e-5, rtol=1e-5)  # fmt: skip


def layer_parameter_names(model):
    return {n.split("layers.0.", 1)[1] for n, _ in model.named_parameters() if ".layers.0." in n}


@pytest.mark.parametrize("arch", ["normformer_roberta_base", "normformer_bert_base"])
def test_normformer_presets_add_the_paper_operations_on_pre_ln(arch):
    d = dictionary_with_mask()
    baseline = build_encoder_model(arch.replace("normformer_", "preln_"), d)
    model = build_encoder_model(arch, d)
    added = layer_parameter_names(model) - layer_parameter_names(baseline)
    assert added == {
        "attn_ln.weight", "attn_ln.bias", "ffn_layernorm.weight", "ffn_layernorm.bias", "self_attn.head_scale"
    }  # fmt: skip
    assert model.encoder.sentence_encoder.layer_norm is not None  # Pre-LN: a final LayerNorm


@pytest.mark.parametrize("arch, kept", [("preln_roberta_base", False), ("normformer_roberta_base", False),
                                        ("preln_bert_base", True), ("normformer_bert_base", True)])  # fmt: skip
def test_embedding_layernorm_as_fairseqs_roberta_prenorm_or_berts_and_the_command_line_decides(arch, kept):
    d = dictionary_with_mask()
    embedding_ln = [
        build_encoder_model(arch, d, TINY_ENCODER + flag).encoder.sentence_encoder.layernorm_embedding
        for flag in ([], ["--layernorm-embedding"], ["--no-layernorm-embedding"])
    ]
    assert [ln is not None for ln in embedding_ln] == [kept, True, False]


def test_extra_switches_from_the_command_line():
    d = dictionary_with_mask()
    model = build_encoder_model("postln_bert_base", d, TINY_ENCODER + ["--scale-resids", "--scale-qkv"])
    names = layer_parameter_names(model)
    assert {"w_resid", "self_attn.q_ln.weight", "self_attn.k_ln.weight", "self_attn.v_ln.weight"} <= names
    assert not model.encoder.sentence_encoder.layers[0].normalize_before


@pytest.mark.parametrize(
    "arch, layers, dim, heads, ffn, pre_ln",
    [
        ("normformer_roberta", 12, 768, 12, 3072, False),
        ("preln_roberta_base", 12, 768, 12, 3072, True),
        ("normformer_roberta_large", 24, 1024, 16, 4096, True),
        ("postln_bert_base", 12, 768, 12, 3072, False),
        ("postln_bert_large", 24, 1024, 16, 4096, False),
        ("normformer_bert_large", 24, 1024, 16, 4096, True),
    ],
)
def test_preset_sizes_fill_only_unset_values(arch, layers, dim, heads, ffn, pre_ln):
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    shape = (args.encoder_layers, args.encoder_embed_dim, args.encoder_attention_heads, args.encoder_ffn_embed_dim)
    assert shape == (layers, dim, heads, ffn)
    assert args.encoder_normalize_before == pre_ln and args.encoder_learned_pos
    user = argparse.Namespace(encoder_layers=3, encoder_normalize_before=not pre_ln)
    ARCH_CONFIG_REGISTRY[arch](user)
    assert user.encoder_layers == 3 and user.encoder_normalize_before == (not pre_ln)


def test_bert_segments_follow_the_first_separator():
    cls, sep, pad = 0, 2, 1
    tokens = torch.tensor([[cls, 7, 8, sep, 9, sep, pad], [cls, 7, sep, sep, 9, 5, sep]])  # BERT's, RoBERTa's GLUE
    expected = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])
    assert torch.equal(segment_ids(tokens, sep), expected)


def test_new_classification_head_starts_from_the_pretrained_pooler():
    d = dictionary_with_mask()
    pretrained = build_encoder_model("normformer_bert_base", d)
    finetuned = build_encoder_model("normformer_bert_base", d)
    finetuned.register_classification_head("sentence_classification_head", num_classes=3)
    head = finetuned.classification_heads["sentence_classification_head"]
    out_proj = head.out_proj.weight.detach().clone()
    finetuned.load_state_dict(pretrained.state_dict())  # as --restore-file does: upgrade, then load
    torch.testing.assert_close(head.dense.weight, pretrained.encoder.pooler.dense.weight, atol=0, rtol=0)
    torch.testing.assert_close(head.dense.bias, pretrained.encoder.pooler.dense.bias, atol=0, rtol=0)
    torch.testing.assert_close(head.out_proj.weight, out_proj, atol=0, rtol=0)  # new: keeps its own init
    tokens = torch.tensor([[d.bos(), 10, d.eos(), 11, d.eos()]])
    logits = finetuned(tokens, classification_head_name="sentence_classification_head")[0]
    assert logits.shape == (1, 3)

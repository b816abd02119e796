"""The operations table (modules/operations.py) against the layers it describes, the options every model
declares from it, fairseq's own NormFormer layer, and docs/model.md."""
import re
from pathlib import Path

import pytest
from fairseq import options
from fairseq.models.transformer import TransformerConfig
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

import fairseq_normformer
from fairseq_normformer.models.normformer_lm import NormFormerLanguageModelConfig
from fairseq_normformer.modules import LayerConfig, NormFormerLayer
from fairseq_normformer.modules.operations import DEEPNORM, OPERATIONS, POST_LN, SWITCHES, markdown_table, norm_kinds_table

from ..models.encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [(32, 48, 4), (24, 80, 3)]  # (d, f, H)


def layer_params(d, f, heads, **switches):
    layer = NormFormerLayer(LayerConfig(d, f, heads, **switches))
    return {name: p.numel() for name, p in layer.named_parameters()}


def only(op):
    """LayerConfig keywords with just this row switched on (Post-LN is LayerConfig's normalize_before,
    DeepNorm its α and β on Post-LN)."""
    if op is DEEPNORM:
        return {"normalize_before": False, "deepnorm_alpha": 2.0, "deepnorm_beta": 0.5}
    return {"normalize_before": False} if op is POST_LN else {op.field: True}


@pytest.mark.parametrize("op", SWITCHES, ids=lambda op: op.field)
@pytest.mark.parametrize("d, f, heads", SHAPES)
def test_each_row_adds_exactly_its_parameters(op, d, f, heads):
    baseline, switched = layer_params(d, f, heads), layer_params(d, f, heads, **only(op))
    added = set(switched) - set(baseline)
    assert added == set(op.params) and len(op.params) == len(added)
    assert set(baseline) <= set(switched)
    assert sum(switched.values()) - sum(baseline.values()) == op.num_params(d, f, heads)


def test_per_layer_formulas_are_the_papers():
    d, f, heads = 7, 11, 13  # distinct primes: each formula's symbol and coefficient show
    counts = {op.label: op.num_params(d, f, heads) for op in SWITCHES}
    assert counts == {"Post-Attn LN": 2 * d, "FFN LN": 2 * f, "HeadScale": heads, "ResScale": d, "QKV LN": 6 * d,
                      "Post-LN baseline": 0, "QK-norm": 4 * (d // heads), "Sandwich LN": 4 * d,
                      "DeepNorm": 0}  # fmt: skip
    qk_norm = next(op for op in SWITCHES if op.field == "qk_norm")
    assert qk_norm.num_params(24, 11, 3) == 4 * 8  # two norms over the head dim, 24 / 3
    assert sum(op.num_params(d, f, heads) for op in OPERATIONS if op.in_normformer) == 2 * d + 2 * f + heads


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op.in_fairseq], ids=lambda op: op.field)
def test_fairseq_names_are_those_of_fairseqs_own_layer(op):
    """fairseq's TransformerDecoderLayer with the same switch on has exactly the row's fairseq names."""

    def names(**switches):
        cfg = TransformerConfig()
        cfg.decoder.embed_dim, cfg.decoder.ffn_embed_dim, cfg.decoder.attention_heads = 32, 48, 4
        for switch, value in switches.items():
            setattr(cfg, switch, value)
        return {name for name, _ in TransformerDecoderLayerBase(cfg, no_encoder_attn=True).named_parameters()}

    assert names(**{op.field: True}) - names() == set(op.fairseq_params)


def model_parser_actions(task, arch, flags=()):
    """The argparse actions fairseq-train's parser has for ``--arch arch`` (model options included)."""
    parser = options.get_training_parser()
    options.parse_args_and_arch(parser, ["unused-data-dir", "--task", task, "--arch", arch, *flags])
    return {flag: action for action in parser._actions for flag in action.option_strings}


@pytest.mark.parametrize(
    "task, arch", [("language_modeling", "normformer_lm"), ("masked_lm", "normformer_roberta"),
                   ("masked_lm", "normformer_bert"), ("translation", "normformer_transformer")]
)  # fmt: skip
def test_every_model_declares_every_row_with_its_help(task, arch):
    actions = model_parser_actions(task, arch)
    for op in SWITCHES:
        assert actions[op.flag].help == op.help, (arch, op.flag)
        assert actions[op.flag].dest == op.field


def test_the_lm_config_replaces_fairseqs_declarations():
    """fairseq's TransformerLanguageModelConfig declares scale_* too; ours come first and win."""
    fields = NormFormerLanguageModelConfig.__dataclass_fields__
    for op in SWITCHES:
        assert fields[op.field].metadata["help"] == op.help and fields[op.field].default is False


OTHER_OPTIONS = ("head_scale_position", "layernorm_impl")


def test_each_option_is_declared_once_in_the_package():
    """No hand-written declaration of a table row's option anywhere; the other options exactly once."""
    package = Path(fairseq_normformer.__file__).parent
    source = "\n".join(p.read_text(encoding="utf-8") for p in sorted(package.rglob("*.py")))
    for name in [op.field for op in SWITCHES] + list(OTHER_OPTIONS):
        declarations = re.findall(rf"^\s*{name}\s*:[^=\n]*=\s*field\(", source, flags=re.MULTILINE)
        declarations += re.findall(rf"add_argument\(\s*[\"']--{name.replace('_', '-')}[\"']", source)
        assert len(declarations) == (name in OTHER_OPTIONS), (name, declarations)
    fields = [op.field for op in SWITCHES]
    assert len(fields) == len(set(fields))  # and the table names each switch once


@pytest.mark.parametrize(
    "arch, flags, post_ln",
    [
        ("normformer_roberta", [], True),  # fairseq's roberta_base is Post-LN
        ("normformer_roberta", ["--encoder-normalize-before"], False),  # the alias decides
        ("postln_bert_base", ["--encoder-normalize-before"], False),
        ("preln_bert_base", ["--post-ln"], True),
        ("postln_bert_base", [], True),
        ("normformer_bert_base", [], False),
    ],
)
def test_post_ln_on_encoders_and_its_fairseq_alias(arch, flags, post_ln):
    model = build_encoder_model(arch, dictionary_with_mask(), TINY_ENCODER + flags)
    encoder = model.encoder.sentence_encoder
    assert model.args.post_ln == post_ln and model.args.encoder_normalize_before == (not post_ln)
    assert all(layer.normalize_before == (not post_ln) for layer in encoder.layers)
    assert (encoder.layer_norm is None) == post_ln  # Pre-LN ends in a final LayerNorm


def test_contradicting_post_ln_and_encoder_normalize_before_is_an_error():
    with pytest.raises(ValueError, match="--post-ln is True but --encoder-normalize-before"):
        model_parser_actions("masked_lm", "preln_roberta_base", ["--post-ln", "--encoder-normalize-before"])


def test_docs_table_is_rendered_from_the_operations_table():
    assert markdown_table() in (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    assert norm_kinds_table() in (ROOT / "docs" / "model.md").read_text(encoding="utf-8")

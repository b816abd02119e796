"""normformer_transformer: fairseq's transformer with every switch off, incremental decoding and beam
reordering, the presets, the encoder-attention extension's parameters."""
from pathlib import Path

import pytest
import torch
from fairseq import options
from fairseq.models import ARCH_MODEL_REGISTRY

from fairseq_normformer.modules import LayerConfig, NormFormerCrossAttentionDecoderLayer
from fairseq_normformer.modules.operations import ENCODER_ATTENTION_OPERATIONS, OPERATIONS, markdown_table

from .lm_builders import randomize_
from .translation_builders import PAD, TINY_MT, build_translation_model, fairseq_and_ours, language_dictionary
from .translation_builders import padded_batch, parse_translation

TOL = 1e-5  # fp32
PRE_LN = ["--encoder-normalize-before", "--decoder-normalize-before"]
SHARED = ["--share-all-embeddings"]
CASES = {  # fairseq's flags, our arch and flags, Pre-LN
    "post_ln": ([], "normformer_transformer", [], False),
    "post_ln_as_our_flag": ([], "normformer_transformer", ["--post-ln"], False),
    "pre_ln": (PRE_LN, "normformer_transformer", PRE_LN, True),
    "pre_ln_preset": (PRE_LN, "preln_transformer_iwslt_de_en", [], True),
    "shared_embeddings_pre_ln": (PRE_LN + SHARED, "preln_transformer_wmt_en_de", SHARED, True),
    "tied_decoder_embeddings": (["--share-decoder-input-output-embed"], "postln_transformer_wmt_en_de_big",
                                ["--share-decoder-input-output-embed"], False),
}  # fmt: skip
ALL_SWITCHES = [op.flag for op in OPERATIONS + ENCODER_ATTENTION_OPERATIONS]


def dictionaries(shared):
    src = language_dictionary("de")
    return src, (src if shared else language_dictionary("en", 30))


@pytest.mark.parametrize("case", CASES)
def test_every_switch_off_is_fairseqs_transformer(case):
    their_flags, our_arch, our_flags, pre_ln = CASES[case]
    src_dict, tgt_dict = dictionaries(shared=SHARED[0] in their_flags)
    theirs, ours = fairseq_and_ours(TINY_MT + their_flags, our_arch, TINY_MT + our_flags, src_dict, tgt_dict)
    assert all(layer.normalize_before == pre_ln for layer in [*ours.encoder.layers, *ours.decoder.layers])

    src, src_lengths, prev = padded_batch([7, 3, 5], [6, 2, 4], vocab=len(tgt_dict))
    with torch.no_grad():
        diff = (ours(src, src_lengths, prev)[0] - theirs(src, src_lengths, prev)[0]).abs()
    assert diff[prev.ne(PAD)].max().item() <= TOL, case


def randomized_model(arch="normformer_transformer", flags=()):
    src_dict, tgt_dict = dictionaries(shared=False)
    _, model = build_translation_model(arch, TINY_MT + list(flags), src_dict, tgt_dict)
    randomize_(model)
    return model.eval()


def decode_incrementally(model, src, src_lengths, prev, reorder_at=None, new_order=None):
    """One decoder call per target column (fairseq passes the whole prefix each time); at step ``reorder_at``
    the incremental state and the encoder output are reordered as beam search does. Returns the logits of
    the steps from ``reorder_at`` on (all steps without it), (B, T, V)."""
    encoder_out = model.encoder(src, src_lengths)
    state, steps = {}, []
    for t in range(prev.size(1)):
        if t == reorder_at:
            model.decoder.reorder_incremental_state_scripting(state, new_order)
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
            prev = prev.index_select(0, new_order)
        steps.append(model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)[0][:, -1])
    return torch.stack(steps[reorder_at or 0 :], dim=1)


@pytest.mark.parametrize("flags", [ALL_SWITCHES, ALL_SWITCHES + ["--post-ln"]], ids=["pre_ln", "post_ln"])
def test_incremental_decoding_equals_the_full_forward(flags):
    model = randomized_model(flags=flags)
    src, src_lengths, prev = padded_batch([7, 3, 5], [5, 5, 5], vocab=30)
    with torch.no_grad():
        steps = decode_incrementally(model, src, src_lengths, prev)
        assert (steps - model(src, src_lengths, prev)[0]).abs().max().item() <= TOL

        new_order = torch.tensor([2, 2, 0, 1])  # beam search: rows repeated, dropped and moved
        steps = decode_incrementally(model, src, src_lengths, prev, reorder_at=3, new_order=new_order)
        full = model(src[new_order], src_lengths[new_order], prev[new_order])[0]
    assert (steps - full[:, 3:]).abs().max().item() <= TOL


@pytest.mark.parametrize("op", ENCODER_ATTENTION_OPERATIONS, ids=lambda op: op.field)
def test_each_encoder_attention_switch_adds_exactly_its_parameters(op):
    d, f, heads = 24, 40, 3

    def params(**switches):
        layer = NormFormerCrossAttentionDecoderLayer(LayerConfig(d, f, heads, **switches))
        return {name: p.numel() for name, p in layer.named_parameters()}

    baseline, switched = params(), params(**{op.field: True})
    assert set(switched) - set(baseline) == set(op.params)
    assert sum(switched.values()) - sum(baseline.values()) == op.num_params(d, f, heads)


def test_encoder_attention_switches_are_options_with_their_help():
    parser = options.get_training_parser()
    options.parse_args_and_arch(parser, ["unused-data-dir", "--task", "translation", "--arch", "normformer_transformer"])
    actions = {flag: action for action in parser._actions for flag in action.option_strings}
    for op in ENCODER_ATTENTION_OPERATIONS:
        assert actions[op.flag].help == op.help and "not in the paper" in op.help
    assert parse_translation("normformer_transformer", []).scale_enc_attn is False
    assert parse_translation("normformer_transformer", ["--scale-enc-attn"]).scale_enc_attn is True


SIZES = ("encoder_layers", "decoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim",
         "encoder_attention_heads", "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads",
         "dropout", "attention_dropout", "activation_fn")  # fmt: skip


@pytest.mark.parametrize("size", ["iwslt_de_en", "wmt_en_de", "wmt_en_de_big"])
def test_presets_have_fairseqs_sizes_and_their_layer_norm_placement(size):
    theirs = parse_translation(f"transformer_{size}", [])
    for kind, post_ln, normformer in [("postln", True, False), ("preln", False, False), ("normformer", False, True)]:
        ours = parse_translation(f"{kind}_transformer_{size}", [])
        assert {k: getattr(ours, k) for k in SIZES} == {k: getattr(theirs, k) for k in SIZES}, kind
        assert (ours.post_ln, ours.encoder_normalize_before, ours.decoder_normalize_before) == (
            post_ln, not post_ln, not post_ln)  # fmt: skip
        assert {op.field: getattr(ours, op.field) for op in OPERATIONS} == {
            op.field: normformer and op.in_normformer for op in OPERATIONS}  # fmt: skip
        assert not any(getattr(ours, op.field) for op in ENCODER_ATTENTION_OPERATIONS)


def test_presets_fill_only_unset_values():
    ours = parse_translation("normformer_transformer_iwslt_de_en",
                             ["--post-ln", "--encoder-layers", "3"])  # fmt: skip
    assert (ours.post_ln, ours.encoder_normalize_before, ours.decoder_normalize_before) == (True, False, False)
    assert ours.encoder_layers == 3 and ours.scale_fc and ours.scale_heads
    assert parse_translation("postln_transformer_wmt_en_de", ["--decoder-normalize-before"]).post_ln is False


def test_post_ln_contradicting_fairseqs_flag_is_an_error():
    with pytest.raises(ValueError, match="--post-ln is True but --decoder-normalize-before"):
        parse_translation("preln_transformer_iwslt_de_en", ["--post-ln", "--decoder-normalize-before"])


def test_unsupported_fairseq_options_are_errors():
    src_dict, tgt_dict = dictionaries(shared=False)
    with pytest.raises(ValueError, match="does not support --no-cross-attention"):
        build_translation_model("normformer_transformer", TINY_MT + ["--no-cross-attention"], src_dict, tgt_dict)
    with pytest.raises(ValueError, match="--encoder-embed-dim \\(32\\) equal to --decoder-embed-dim \\(16\\)"):
        flags = TINY_MT + ["--decoder-embed-dim", "16"]
        ARCH_MODEL_REGISTRY["normformer_transformer"].build_model(parse_translation("normformer_transformer", flags),
                                                                  None)  # fmt: skip


def test_docs_table_of_the_extension_is_rendered_from_its_rows():
    docs = Path(__file__).resolve().parents[2] / "docs" / "translation.md"
    assert markdown_table(ENCODER_ATTENTION_OPERATIONS) in docs.read_text(encoding="utf-8")

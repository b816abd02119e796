"""normformer_lm: parameter counts, presets, switches, incremental decoding, configuration errors."""
import pytest
import torch

from .lm_builders import TINY, normformer_lm, num_params, parse, randomized_normformer_lm, tiny_dictionary

NORMFORMER = ["--scale-attn", "--scale-fc", "--scale-heads"]
L, D, F, H = 2, 32, 48, 4  # the TINY shape


def test_normformer_adds_exactly_the_papers_parameters():
    d = tiny_dictionary()
    base = num_params(normformer_lm(d, flags=TINY))
    assert num_params(normformer_lm(d, flags=TINY + NORMFORMER)) - base == L * (2 * D + 2 * F) + L * H
    assert num_params(normformer_lm(d, flags=TINY + ["--scale-resids"])) - base == L * D
    assert num_params(normformer_lm(d, flags=TINY + ["--scale-qkv"])) - base == L * 3 * 2 * D


def test_gpt3_small_presets_count():
    """125M preset: the Pre-LN count from the GPT-3 shape, and NormFormer adds L(2d+2f) + LH."""
    d = tiny_dictionary(1000)
    layers, dim, ffn, heads = 12, 768, 3072, 12
    per_layer = 4 * dim * dim + 4 * dim + 2 * dim * ffn + ffn + dim + 2 * 2 * dim
    expected = len(d) * dim + layers * per_layer + 2 * dim  # tied embeddings, sinusoidal positions, final LN
    assert num_params(normformer_lm(d, "preln_lm_gpt3_small")) == expected
    assert num_params(normformer_lm(d, "normformer_lm_gpt3_small")) == expected + layers * (
        2 * dim + 2 * ffn) + layers * heads


def test_presets_only_fill_unset_values():
    args = parse("normformer_lm_gpt3_small", ["--decoder-layers", "3", "--decoder-learned-pos", "--dropout", "0.2"])
    assert (args.decoder_layers, args.decoder_embed_dim, args.decoder_attention_heads) == (3, 768, 12)
    assert args.decoder_learned_pos and args.dropout == 0.2
    assert args.scale_attn and args.scale_fc and args.scale_heads and not args.scale_resids
    assert args.share_decoder_input_output_embed and args.activation_fn == "gelu"
    baseline = parse("preln_lm_gpt3_medium", [])
    assert (baseline.decoder_layers, baseline.decoder_embed_dim, baseline.decoder_ffn_embed_dim) == (24, 1024, 4096)
    assert not (baseline.scale_attn or baseline.scale_fc or baseline.scale_heads)
    assert not baseline.decoder_learned_pos  # sinusoidal by default, as the paper
    wiki = parse("normformer_lm_wiki103", [])
    assert wiki.adaptive_input and wiki.adaptive_softmax_cutoff == "20000,60000" and wiki.decoder_layers == 16
    assert wiki.scale_attn and wiki.scale_fc and wiki.scale_heads


TOKENS = torch.randint(4, 50, (2, 12), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("flag", ["--scale-attn", "--scale-fc", "--scale-heads", "--scale-resids", "--scale-qkv", "--post-ln"])
def test_each_switch_changes_the_output(flag):
    base, switched = randomized_normformer_lm([]), randomized_normformer_lm([flag])
    switched.load_state_dict(base.state_dict(), strict=False)  # shared weights; the switch's own stay random
    assert (switched(TOKENS)[0] - base(TOKENS)[0]).abs().max() > 1e-3


def test_post_ln_has_no_final_layer_norm():
    assert normformer_lm(tiny_dictionary(), flags=TINY + ["--post-ln"]).decoder.layer_norm is None
    assert normformer_lm(tiny_dictionary(), flags=TINY).decoder.layer_norm is not None


ALL = NORMFORMER + ["--scale-resids", "--scale-qkv"]


@pytest.mark.parametrize("flags", [[], ALL, ALL + ["--head-scale-position", "after_wo"], ALL + ["--post-ln"]])
def test_incremental_decoding_matches_full_forward(flags):
    model = randomized_normformer_lm(flags)
    full = model(TOKENS)[0]
    state = {}
    steps = [model.decoder(TOKENS[:, : t + 1], incremental_state=state)[0][:, -1] for t in range(TOKENS.size(1))]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_reordered_incremental_state_follows_the_batch():
    """Beam search reorders the cache; continuing must equal decoding the reordered batch."""
    model = randomized_normformer_lm(ALL)
    new_order = torch.tensor([1, 1])
    state = {}
    for t in range(5):
        model.decoder(TOKENS[:, : t + 1], incremental_state=state)
    model.decoder.reorder_incremental_state_scripting(state, new_order)
    reordered = TOKENS[new_order]
    step = model.decoder(reordered[:, :6], incremental_state=state)[0][:, -1]
    torch.testing.assert_close(step, model(reordered[:, :6])[0][:, -1], atol=1e-5, rtol=1e-5)


def test_bad_configurations_name_the_problem():
    d = tiny_dictionary()
    with pytest.raises(ValueError, match="not divisible by the number of attention heads"):
        normformer_lm(d, flags=["--decoder-embed-dim", "30", "--decoder-attention-heads", "4"])
    with pytest.raises(ValueError, match="apex"):
        normformer_lm(d, flags=TINY + ["--layernorm-impl", "apex"])
    with pytest.raises(SystemExit):  # argparse rejects unknown choices
        parse("normformer_lm", ["--head-scale-position", "before"])
    with pytest.raises(ValueError, match="--dropout"):
        normformer_lm(d, flags=TINY + ["--dropout", "1.5"])


def test_relu_squared_is_accepted():
    """The authors' 2.7B NormFormer uses relu_squared, which fairseq's choices omit."""
    model = normformer_lm(tiny_dictionary(), flags=TINY + ["--activation-fn", "relu_squared"])
    x = torch.tensor([-2.0, 3.0])
    torch.testing.assert_close(model.decoder.layers[0].activation_fn(x), torch.relu(x) ** 2)

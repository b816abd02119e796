"""Mix-LN (--post-ln-layers), LayerNorm Scaling (--ln-scaling), ReZero (--rezero) and OLMo 2's reordered norm
(--reordered-norm) on whole models, against the
stack written out in plain torch, and the issue's acceptance checks: Mix-LN with no Post-LN layer is Pre-LN
exactly; LayerNorm Scaling changes the first loss, not the parameters; ReZero has no norms and its first logits
are the embedding-only model's."""
import math

import pytest
import torch
import torch.nn.functional as F

from fairseq_normformer.checks import BadInput
from fairseq_normformer.hf.norm_kinds import NORM_MODULES

from .encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask
from .lm_builders import TINY, _perturb_1d_, normformer_lm, tiny_dictionary

EPS = 1e-5


def layer_norm_eq(x, norm):  # (x − mean(x)) / sqrt(var(x) + ε) · g + b
    centered = x - x.mean(-1, keepdim=True)
    return centered / torch.sqrt(centered.pow(2).mean(-1, keepdim=True) + EPS) * norm.weight + norm.bias


def layer_eq(layer, x, post_ln: bool, scale: float):
    """One layer: Pre-LN x + f(LN(x) · scale) (LayerNorm Scaling: scale = 1/sqrt(ℓ)), or Post-LN LN(x + f(x))."""

    def sublayer(x, norm, f):
        return layer_norm_eq(x + f(x), norm) if post_ln else x + f(layer_norm_eq(x, norm) * scale)

    x = sublayer(x, layer.self_attn_layer_norm, lambda h: layer.self_attn(h, None, True, None))
    return sublayer(x, layer.final_layer_norm, lambda h: layer.fc2(F.relu(layer.fc1(h))))


def lm(*flags, seed=1):
    torch.manual_seed(seed)
    return normformer_lm(tiny_dictionary(), flags=TINY + ["--decoder-layers", "3", *flags]).eval()


TOKENS = torch.randint(4, 50, (2, 9), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("flags, post_ln_layers, scaled", [
    (["--post-ln-layers", "first:1"], {0}, False),
    (["--ln-scaling"], set(), True),
    (["--post-ln-layers", "0,2", "--ln-scaling"], {0, 2}, True),
])  # fmt: skip
@torch.no_grad()
def test_the_stack_is_its_equations(flags, post_ln_layers, scaled):
    model = lm(*flags)
    _perturb_1d_(model, 0.3)
    decoder = model.decoder
    x = (decoder.embed_scale * decoder.embed_tokens(TOKENS) + decoder.embed_positions(TOKENS)).transpose(0, 1)
    for i, layer in enumerate(decoder.layers):
        x = layer_eq(layer, x, post_ln=i in post_ln_layers, scale=1 / math.sqrt(i + 1) if scaled else 1.0)
    expected = decoder.output_layer(layer_norm_eq(x, decoder.layer_norm).transpose(0, 1))
    torch.testing.assert_close(model(TOKENS)[0], expected, atol=1e-5, rtol=1e-5)


def roberta(*flags, seed=1):
    torch.manual_seed(seed)
    return build_encoder_model("preln_roberta_base", dictionary_with_mask(), TINY_ENCODER + list(flags)).eval()


def first_loss(model):
    logits = model(TOKENS)[0]
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), TOKENS[:, 1:].flatten()).item()


def num_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("build", [lm, roberta])
@torch.no_grad()
def test_mix_ln_with_no_post_ln_layer_is_pre_ln_exactly(build):
    pre_ln, mix_ln = build(), build("--post-ln-layers", "first:0")
    assert torch.equal(mix_ln(TOKENS)[0], pre_ln(TOKENS)[0])  # (first:1 acts: test_the_stack_is_its_equations)


@pytest.mark.parametrize("build", [lm, roberta])
@torch.no_grad()
def test_ln_scaling_changes_the_first_loss_not_the_parameters(build):
    pre_ln, scaled = build(), build("--ln-scaling")
    assert {n: p.shape for n, p in scaled.named_parameters()} == {n: p.shape for n, p in pre_ln.named_parameters()}
    assert all(torch.equal(p, q) for p, q in zip(scaled.parameters(), pre_ln.parameters()))
    assert abs(first_loss(scaled) - first_loss(pre_ln)) > 1e-4


@pytest.mark.parametrize("build, flags, message", [
    (lm, ["--post-ln", "--post-ln-layers", "first:1"], r"^--post-ln-layers makes some layers .*: drop --post-ln$"),
    (roberta, ["--post-ln-layers", "first:3"], r"^--post-ln-layers 'first:3': expected all, first:K, last:K \(K <= 2\)"),
    (lm, ["--post-ln", "--ln-scaling"], r"^--ln-scaling scales the Pre-LN norms' outputs.*: drop --post-ln$"),
    (roberta, ["--post-ln", "--rezero"], r"^--rezero has no norms.*: drop --post-ln$"),
    (lm, ["--post-ln", "--reordered-norm"], r"^--reordered-norm puts the norm on each sublayer's output.*: drop --post-ln$"),
])  # fmt: skip
def test_bad_options_are_one_line_naming_the_flag(build, flags, message):
    with pytest.raises(BadInput, match=message):
        build(*flags)


def norm_modules(model):
    return [name for name, m in model.named_modules() if isinstance(m, NORM_MODULES)]


@torch.no_grad()
def test_rezero_lm_has_no_norms_and_its_first_logits_are_the_embedding_only_models():
    model = lm("--rezero")
    assert norm_modules(model) == [] and [n for n, _ in model.named_parameters() if "rezero" in n] == [
        f"decoder.layers.{i}.rezero_alpha" for i in range(3)
    ]
    decoder = model.decoder
    embeddings = decoder.embed_scale * decoder.embed_tokens(TOKENS) + decoder.embed_positions(TOKENS)
    torch.testing.assert_close(model(TOKENS)[0], F.linear(embeddings, decoder.output_projection.weight))


@torch.no_grad()
def test_rezero_masked_lm_has_no_norms_and_its_first_logits_are_the_embedding_only_models():
    model = roberta("--rezero")
    encoder, head = model.encoder.sentence_encoder, model.encoder.lm_head
    assert norm_modules(model) == []
    x = encoder.embed_tokens(TOKENS) + encoder.embed_positions(TOKENS)  # no padding in TOKENS; embed_scale 1
    expected = F.linear(F.gelu(head.dense(x)), head.weight) + head.bias  # the LM head without its norm
    torch.testing.assert_close(model(TOKENS)[0], expected, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_rezero_layer_is_x_plus_alpha_f_x():
    model = lm("--rezero")
    layer = model.decoder.layers[1]
    layer.rezero_alpha.fill_(0.7)
    x = torch.randn(5, 2, 32)
    h = x + 0.7 * layer.self_attn(x, None, True, None)  # ReZero: x + α f(x), no norm
    expected = h + 0.7 * layer.fc2(F.relu(layer.fc1(h)))
    torch.testing.assert_close(layer(x)[0], expected)


def test_reordered_norm_has_the_output_norms_only_and_is_x_plus_n_of_f_x():
    model = lm("--reordered-norm")
    names = {n for n, _ in model.named_parameters()}
    assert {"decoder.layers.0.attn_ln.weight", "decoder.layers.0.ffn_out_ln.weight", "decoder.layer_norm.weight"} <= names
    assert not any("self_attn_layer_norm" in n or "final_layer_norm" in n for n in names)
    assert num_params(model) == num_params(lm())  # the two norms per layer moved from input to output
    _perturb_1d_(model, 0.3)
    layer = model.decoder.layers[2]
    x = torch.randn(5, 2, 32)
    with torch.no_grad():
        h = x + layer_norm_eq(layer.self_attn(x, None, True, None), layer.attn_ln)  # OLMo 2: x + N(f(x))
        expected = h + layer_norm_eq(layer.fc2(F.relu(layer.fc1(h))), layer.ffn_out_ln)
        torch.testing.assert_close(layer(x)[0], expected, atol=1e-5, rtol=1e-5)


def dyt_alphas(stack):
    """(α of each layer's attention norm, of its FFN norm, of the final norm)."""
    layers = stack.layers
    return ([float(l.self_attn_layer_norm.alpha) for l in layers], [float(l.final_layer_norm.alpha) for l in layers],
            float(stack.layer_norm.alpha))  # fmt: skip


@pytest.mark.parametrize("build, stack", [(lm, lambda m: m.decoder), (roberta, lambda m: m.encoder.sentence_encoder)])
def test_dyt_alpha_sets_each_positions_initial_alpha_and_the_others_keep_one_half(build, stack):
    model = build("--norm-type", "dyt", "--scale-attn", "--dyt-alpha", "0.8,0.2,0.3")
    attn, ffn, final = dyt_alphas(stack(model))
    assert attn == pytest.approx([0.8] * len(attn)) and ffn == pytest.approx([0.2] * len(ffn)) and final == pytest.approx(0.3)
    assert float(stack(model).layers[0].attn_ln.alpha) == 0.5  # Post-Attn LN: not one of the three positions
    assert first_loss(model) != first_loss(build("--norm-type", "dyt", "--scale-attn"))


@pytest.mark.parametrize("flags, message", [
    (["--dyt-alpha", "0.8,0.2,0.2"], r"^--dyt-alpha sets the α₀ of DyT's .*: it needs --norm-type dyt"),
    (["--norm-type", "dyt", "--dyt-alpha", "0.8,0.2"], r"^--dyt-alpha '0.8,0.2': expected three numbers ATTN,FFN,FINAL"),
    (["--norm-type", "dyt", "--dyt-alpha", "a,b,c"], r"^--dyt-alpha 'a,b,c': expected three numbers"),
])  # fmt: skip
def test_bad_dyt_alpha_is_one_line(flags, message):
    with pytest.raises(BadInput, match=message):
        lm(*flags)

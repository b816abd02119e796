"""--ffn-norm-impl compile: FC1 -> activation -> FFN norm as one op gives the numbers and gradients of the
formula written out (LayerNorm, LayerNorm without bias, RMSNorm), through torch.compile's own wrapper and
inside a layer. torch.compile runs with its aot_eager backend here (dynamo's trace and the AOT autograd graph,
well under a second); inductor's C++ code generation, which the flag uses, takes 10-20 s a graph on a cold
cache, so the suite does not run it (the benchmark does: docs/benchmarks.md, issue 41)."""
import pytest
import torch
from fairseq import options, tasks
from torch import nn

from fairseq_normformer.checks import BadInput
from fairseq_normformer.modules import LayerConfig, NormFormerLayer
from fairseq_normformer.modules.compiled_ffn_norm import CompiledFC1ActivationNorm, fc1_activation_norm
from tests.conftest import fairseq_config

KINDS = ["layernorm", "layernorm_nobias", "rmsnorm"]
D, F, EPS = 8, 24, 1e-5


def formula(x, w1, b1, g, b, kind: str, activation):
    """N(act(x W1ᵀ + b1)), the norm written out over the last dimension."""
    h = activation(x @ w1.T + b1)
    if kind == "rmsnorm":
        return h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * g
    centred = h - h.mean(-1, keepdim=True)
    y = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + EPS) * g
    return y if b is None else y + b


def parameters(kind: str) -> list:
    """x, W1, b1, g and (layernorm only) b, random, requiring gradients."""
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 3, D), (F, D), (F,), (F,)] + ([(F,)] if kind == "layernorm" else [])
    return [torch.randn(shape, generator=g).requires_grad_() for shape in shapes]


def output_and_grads(fn, tensors: list) -> list:
    y = fn(*tensors)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    return [y, *torch.autograd.grad(y, tensors, dy)]


@pytest.mark.parametrize("activation", [torch.relu, torch.nn.functional.gelu])
@pytest.mark.parametrize("kind", KINDS)
def test_function_equals_the_formula(kind, activation):
    tensors = parameters(kind)
    bias = (lambda t: t[4]) if kind == "layernorm" else (lambda t: None)  # noqa: E731
    got = output_and_grads(lambda *t: fc1_activation_norm(*t[:4], bias(t), EPS, activation, kind), tensors)
    want = output_and_grads(lambda *t: formula(*t[:4], bias(t), kind, activation), tensors)
    for name, a, b in zip(["y", "dx", "dW1", "db1", "dg", "db"], got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{kind} {name}: {m}")


def norm_module(kind: str) -> nn.Module:
    norms = {"layernorm": lambda: nn.LayerNorm(F), "layernorm_nobias": lambda: nn.LayerNorm(F, bias=False),
             "rmsnorm": lambda: nn.RMSNorm(F, eps=EPS)}  # fmt: skip
    return norms[kind]()


@pytest.mark.parametrize("kind", KINDS)
def test_compiled_module_equals_fc1_activation_then_norm(kind):
    """The torch.compile wrapper (aot_eager) against nn.Linear, fairseq's relu and torch's norm module."""
    torch.manual_seed(0)
    fc1, norm = nn.Linear(D, F), norm_module(kind)
    nn.init.normal_(norm.weight, 1.0, 0.5)
    x = torch.randn(5, 3, D, requires_grad=True)
    leaves = [x, *fc1.parameters(), *norm.parameters()]
    compiled = CompiledFC1ActivationNorm("relu", kind, backend="aot_eager")
    got = output_and_grads(lambda *_: compiled(x, fc1, norm), leaves)
    want = output_and_grads(lambda *_: norm(torch.relu(fc1(x))), leaves)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def layer_config(**overrides) -> LayerConfig:
    return LayerConfig(embed_dim=D * 4, ffn_embed_dim=F * 4, attention_heads=4, scale_attn=True, scale_fc=True,
                       scale_heads=True, activation_fn="gelu", **overrides)  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_layer_with_compile_equals_the_eager_layer(kind):
    """Output and the gradients of the input and of every parameter, against the layer's eager path."""
    torch.manual_seed(0)
    eager = NormFormerLayer(layer_config(ffn_norm_type=kind))
    compiled = NormFormerLayer(layer_config(ffn_norm_type=kind, ffn_norm_impl="compile"))
    compiled.load_state_dict(eager.state_dict())  # the same parameter names: checkpoints load either way
    compiled.fc1_act_norm.backend = "aot_eager"
    x = torch.randn(6, 2, D * 4, requires_grad=True)
    got, want = (output_and_grads(lambda x, *_: layer(x), [x, *layer.parameters()]) for layer in (compiled, eager))
    names = ["y", "dx", *dict(eager.named_parameters())]
    for name, a, b in zip(names, got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_unfusable_settings_are_refused_in_one_line():
    with pytest.raises(BadInput, match=r"^--ffn-norm-impl compile fuses an FFN norm of kind .*, not dyt"):
        layer_config(norm_type="dyt", ffn_norm_impl="compile")
    with pytest.raises(BadInput, match=r"^--ffn-norm-impl compile has no activation dropout"):
        layer_config(activation_dropout=0.1, ffn_norm_impl="compile")
    with pytest.raises(BadInput, match=r"^--ffn-norm-impl='fused' is not one of eager, compile"):
        layer_config(ffn_norm_impl="fused")


def test_the_flag_reaches_the_layers_from_the_command_line(tiny_lm_corpus):
    argv = [str(tiny_lm_corpus.data_bin), "--task", "language_modeling", "--arch", "normformer_lm", "--decoder-layers",
            "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2",
            "--scale-fc", "--ffn-norm-type", "rmsnorm", "--ffn-norm-impl", "compile", "--normformer-layers", "first:1"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    model = tasks.setup_task(args).build_model(fairseq_config(args).model)
    built = [layer.fc1_act_norm for layer in model.decoder.layers]
    assert [(m.kind, m.backend) for m in built[:1]] == [("rmsnorm", "inductor")] and built[1:] == [None]

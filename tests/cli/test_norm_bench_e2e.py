"""The normalization-bench switches through the real fairseq-train, in-process (run_cli): one tiny causal LM and
one tiny masked LM (MLM + NSP) with every switch on at once, two updates each; the schemes since 2024 that combine
the same way; and each of the three that do not combine with each other, alone, in the family left. The warnings
of fairseq-train's start-up are tests/cli/test_e2e_lm.py's (real processes); these runs' own are checked here."""
import math
import re

import pytest
import torch

from tests.conftest import printed_warnings, python_warnings, run_cli
from tests.distributed.fairseq_runs import logged_updates, tiny_bert_args, tiny_lm_args

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

L, D, F, H = 2, 32, 64, 4  # tiny_lm_args / tiny_bert_args (with NormFormer's three operations)
SCHEMES = ["--post-ln", "--deepnorm", "--qk-norm", "--sandwich-norm"]
LM_SCHEMES = SCHEMES + ["--norm-type", "rmsnorm", "--ffn-norm-type", "layernorm_nobias", "--normformer-layers", "first:1"]
MLM_SCHEMES = SCHEMES + ["--norm-type", "dyt", "--ffn-norm-type", "rmsnorm", "--normformer-layers", "last:1",
                         "--dyt-alpha", "0.8,0.2,0.2"]


def train(args):
    """fairseq-train ``args`` in this process, the warnings it raises printed as a new process prints them."""
    with printed_warnings():
        return run_cli(["fairseq-train", *args])


@pytest.fixture(scope="module")
def runs(tiny_lm_corpus, tiny_bert_corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("norm_bench")
    args = [tiny_lm_args(tiny_lm_corpus.data_bin, root / "lm", "--max-update", "2", *LM_SCHEMES),
            tiny_bert_args(tiny_bert_corpus.data_bin, root / "mlm", "--max-update", "2", *MLM_SCHEMES)]  # fmt: skip
    lm, mlm = map(train, args)
    return {"lm": (lm, root / "lm"), "mlm": (mlm, root / "mlm")}


@pytest.mark.parametrize("name", ["lm", "mlm"])
def test_every_scheme_at_once_trains_through_fairseq_train(runs, name):
    result, save_dir = runs[name]
    assert python_warnings(result.stdout, result.stderr) == []
    losses = [stats["loss"] for stats in logged_updates(result.stdout).values()]
    assert len(losses) == 2 and all(math.isfinite(float(loss)) for loss in losses), losses
    weights = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    layers = r"(decoder|encoder\.sentence_encoder)\.layers\.(\d)\."
    names = {(int(m[2]), name[m.end() :]) for name in weights if (m := re.match(layers, name))}
    every_layer = {"self_attn.q_norm.weight", "self_attn.k_norm.weight", "attn_ln.weight", "ffn_out_ln.weight"}
    assert all((i, n) in names for i in range(L) for n in every_layer)
    normformer_layer = 0 if name == "lm" else L - 1  # first:1, last:1
    assert {i for i, n in names if n == "ffn_layernorm.weight"} == {normformer_layer}
    if name == "lm":  # RMSNorm everywhere, a bias-less LayerNorm as FFN LN: no norm has a bias
        assert not any(n.endswith(("norm.bias", "ln.bias", "layernorm.bias")) for _, n in names)
    else:  # DyT: one α per norm, --dyt-alpha's at its positions after two steps of lr 1e-3
        assert (0, "self_attn_layer_norm.alpha") in names and (0, "self_attn.q_norm.alpha") in names
        alpha = {n: float(weights[f"encoder.sentence_encoder.layers.0.{n}.alpha"]) for n in ("self_attn_layer_norm",
                 "final_layer_norm", "self_attn.q_norm")}  # fmt: skip
        assert alpha == pytest.approx({"self_attn_layer_norm": 0.8, "final_layer_norm": 0.2, "self_attn.q_norm": 0.5},
                                      abs=0.01)


def test_the_lm_logs_the_parameters_of_its_equations(runs, tiny_lm_corpus):
    """Untied embeddings, sinusoidal positions, Post-LN (no final norm); RMSNorm: d per norm over d."""
    result, _ = runs["lm"]
    vocab = sum(1 for _ in open(tiny_lm_corpus.data_bin / "dict.txt")) + 4  # + <s> <pad> </s> <unk>
    linear = 4 * (D * D + D) + (D * F + F) + (F * D + D)
    norms = 2 * D + 2 * (D // H) + 2 * D  # the layer's two, QK-norm over the head dim, sandwich's two
    normformer_layer_0 = H + F  # HeadScale and the bias-less FFN LN (Post-Attn LN is the sandwich's)
    expected = 2 * vocab * D + L * (linear + norms) + normformer_layer_0
    logged = int(re.search(r"num\. shared model params: ([\d,]+)", result.stdout + result.stderr)[1].replace(",", ""))
    assert logged == expected


DEPTH_SCHEMES = ["--post-ln-layers", "first:1", "--ln-scaling", "--zloss", "1e-4"]  # + reordered norm (LM), ReZero (MLM)


@pytest.fixture(scope="module")
def depth_runs(tiny_lm_corpus, tiny_bert_corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("depth_schemes")
    args = [tiny_lm_args(tiny_lm_corpus.data_bin, root / "lm", "--max-update", "2", *DEPTH_SCHEMES, "--qk-norm",
                         "--reordered-norm", "--criterion", "cross_entropy_zloss"),
            tiny_bert_args(tiny_bert_corpus.data_bin, root / "mlm", "--max-update", "2", *DEPTH_SCHEMES, "--rezero")]
    return dict(zip(["lm", "mlm"], map(train, args), strict=True)), root


@pytest.mark.parametrize("name", ["lm", "mlm"])
def test_the_new_schemes_train_through_fairseq_train(depth_runs, name):
    runs, root = depth_runs
    result = runs[name]
    assert python_warnings(result.stdout, result.stderr) == []
    updates = logged_updates(result.stdout).values()
    losses = [float(stats[key]) for stats in updates for key in ("loss", "zloss")]
    assert len(losses) == 4 and all(math.isfinite(loss) and loss > 0 for loss in losses), losses
    model_cfg = torch.load(root / name / "checkpoint_last.pt", map_location="cpu", weights_only=False)["cfg"]["model"]
    get = model_cfg.get if isinstance(model_cfg, dict) else lambda key: getattr(model_cfg, key)
    assert (get("post_ln_layers"), get("ln_scaling"), get("post_ln")) == ("first:1", True, False)
    weights = torch.load(root / name / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    assert ("encoder.sentence_encoder.layers.0.rezero_alpha" in weights) == (name == "mlm")  # ReZero: α per layer
    assert ("decoder.layers.0.ffn_out_ln.weight" in weights) == (name == "lm")  # OLMo 2's output norm
    assert not any(k.endswith("self_attn_layer_norm.weight") for k in weights)  # neither has input norms


# Each scheme alone in the family the runs above leave it out of: ReZero and DyT's α per position in the causal LM,
# OLMo 2's reordered norm in the masked LM (they do not combine: --dyt-alpha needs the input norms the other two
# remove, and ReZero has no norms to reorder). In-process, two updates each.
NORMFORMER_OPS = ("--scale-attn", "--scale-fc", "--scale-heads")


def trained_alone(build_args, data_bin, save_dir, *switches):
    """The checkpoint's weights after two updates of fairseq-train with ``switches``; both losses finite."""
    result = run_cli(["fairseq-train", *build_args(data_bin, save_dir, "--max-update", "2", *switches)])
    losses = [float(stats["loss"]) for stats in logged_updates(result.stdout).values()]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses), losses
    return torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]


def test_rezero_alone_trains_the_causal_lm(tiny_lm_corpus, tmp_path):
    """No norm anywhere (the LM without NormFormer's own operations), α per layer moved off its 0 by training."""
    baseline_lm = lambda *args: [a for a in tiny_lm_args(*args) if a not in NORMFORMER_OPS]  # noqa: E731
    weights = trained_alone(baseline_lm, tiny_lm_corpus.data_bin, tmp_path, "--rezero")
    assert not [name for name in weights if re.search(r"(norm|_ln)\.(weight|bias)$", name)]
    alphas = [float(weights[f"decoder.layers.{i}.rezero_alpha"]) for i in range(L)]
    assert all(abs(alpha) > 1e-4 for alpha in alphas), alphas


def test_dyt_alpha_alone_trains_the_causal_lm(tiny_lm_corpus, tmp_path):
    """Each position's α₀ (attention 0.8, FFN 0.2, final 0.3) after two steps of lr 1e-3; Post-Attn LN keeps DyT's 0.5."""
    weights = trained_alone(tiny_lm_args, tiny_lm_corpus.data_bin, tmp_path, "--norm-type", "dyt", "--dyt-alpha",
                            "0.8,0.2,0.3")  # fmt: skip
    alpha = {name: float(weights[f"decoder.{name}.alpha"]) for name in ("layers.1.self_attn_layer_norm",
             "layers.1.final_layer_norm", "layer_norm", "layers.1.attn_ln")}  # fmt: skip
    assert alpha == pytest.approx({"layers.1.self_attn_layer_norm": 0.8, "layers.1.final_layer_norm": 0.2,
                                   "layer_norm": 0.3, "layers.1.attn_ln": 0.5}, abs=0.01)  # fmt: skip


def test_reordered_norm_alone_trains_the_masked_lm(tiny_bert_corpus, tmp_path):
    """OLMo 2's order: a norm on each sublayer's output (attn_ln, ffn_out_ln), none on its input."""
    weights = trained_alone(tiny_bert_args, tiny_bert_corpus.data_bin, tmp_path, "--reordered-norm")
    layers = "encoder.sentence_encoder.layers"
    assert all(f"{layers}.{i}.{norm}.weight" in weights for i in range(L) for norm in ("attn_ln", "ffn_out_ln"))
    assert not [name for name in weights if name.endswith(("self_attn_layer_norm.weight", "final_layer_norm.weight"))]

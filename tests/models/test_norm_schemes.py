"""The normalization-bench switches on whole models built from command lines: the parameters each adds or
removes (counted from the equations of docs/model.md), DeepNorm's first loss, and the errors. The masked LMs'
counts build from fairseq's argparse Namespace (an argparse model's fast path), the rest as fairseq-train
builds (omegaconf); tests/cli/test_norm_bench_e2e.py trains through fairseq-train."""
import pytest
import torch
import torch.nn.functional as F
from fairseq import options
from fairseq.models import ARCH_MODEL_REGISTRY

from fairseq_normformer.checks import BadInput

from .encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask
from .encoder_builders import fake_task as encoder_task
from .lm_builders import TINY, normformer_lm, tiny_dictionary

L, D, FFN, H = 2, 32, 48, 4  # TINY and TINY_ENCODER
NORMFORMER = ["--scale-attn", "--scale-fc", "--scale-heads"]


def lm_params(*flags) -> int:
    return sum(p.numel() for p in normformer_lm(tiny_dictionary(), flags=TINY + list(flags)).parameters())


def encoder_params(arch, *flags) -> int:
    argv = ["unused-data-dir", "--task", "masked_lm", "--arch", arch, *TINY_ENCODER, *flags]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, encoder_task(dictionary_with_mask()))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.slow
def test_each_scheme_adds_or_removes_its_parameters_in_the_causal_lm():
    preln = lm_params()
    norms = 2 * L + 1  # two per layer and the final one
    assert lm_params("--norm-type", "rmsnorm") == preln - norms * D  # no biases
    # DyT's α per norm and --ffn-norm-type's bias-less FFN LN: counted per norm in tests/modules/test_norm_schemes.py
    assert lm_params("--qk-norm") == preln + L * 2 * 2 * (D // H)  # two LayerNorms over the head dim
    assert lm_params("--sandwich-norm") == preln + L * 4 * D  # (with --scale-attn the same: tests/modules)
    normformer = lm_params(*NORMFORMER)
    assert normformer == preln + L * (2 * D + 2 * FFN + H)
    first = lm_params(*NORMFORMER, "--normformer-layers", "first:1")
    assert preln < first < normformer and first == preln + (2 * D + 2 * FFN + H)


def test_each_scheme_adds_or_removes_its_parameters_in_the_masked_lm():
    """RoBERTa Pre-LN: two norms per layer, the final norm and the LM head's."""
    preln = encoder_params("preln_roberta_base")
    norms = 2 * L + 2
    assert encoder_params("preln_roberta_base", "--norm-type", "rmsnorm") == preln - norms * D
    assert encoder_params("preln_roberta_base", "--qk-norm") == preln + L * 4 * (D // H)
    assert encoder_params("preln_roberta_base", "--sandwich-norm") == preln + L * 4 * D
    normformer = encoder_params("normformer_roberta_base")
    first = encoder_params("normformer_roberta_base", "--normformer-layers", "first:1")
    assert preln < first < normformer and first == preln + (2 * D + 2 * FFN + H)
    assert encoder_params("normformer_roberta", "--deepnorm") == encoder_params("normformer_roberta")  # Post-LN


def first_lm_loss(*flags):
    """(the loss of a first batch, the parameter count) of a model built after the same seed."""
    torch.manual_seed(1)  # as fairseq-train seeds before it builds the model
    model = normformer_lm(tiny_dictionary(), flags=TINY + list(flags)).eval()
    tokens = torch.randint(4, 50, (4, 12), generator=torch.Generator().manual_seed(0))
    logits = model(tokens[:, :-1])[0]
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).item()
    return loss, sum(p.numel() for p in model.parameters())


def test_deepnorm_keeps_post_lns_parameters_but_changes_the_first_loss():
    post_ln, post_ln_params = first_lm_loss("--post-ln")
    deepnorm, deepnorm_params = first_lm_loss("--post-ln", "--deepnorm")
    assert deepnorm_params == post_ln_params
    assert abs(deepnorm - post_ln) > 1e-3, (post_ln, deepnorm)


def build_lm(flags):
    return normformer_lm(tiny_dictionary(), flags=TINY + flags)


def build_roberta(flags):
    return build_encoder_model("preln_roberta_base", dictionary_with_mask(), TINY_ENCODER + flags)


@pytest.mark.parametrize("build, flags, message", [
    (build_lm, ["--deepnorm"], r"^--deepnorm is a Post-LN scheme .*: pass --post-ln with it$"),
    (build_roberta, ["--deepnorm"], r"^--deepnorm is a Post-LN scheme"),
    (build_roberta, ["--normformer-layers", "first:3"], r"^--normformer-layers 'first:3': expected all, first:K, "
                                                        r"last:K \(K <= 2\)"),
    (build_lm, ["--normformer-layers", "0;1"], r"^--normformer-layers '0;1'"),
])  # fmt: skip
def test_bad_scheme_options_are_one_line_naming_the_flag(build, flags, message):
    with pytest.raises(BadInput, match=message):
        build(flags)

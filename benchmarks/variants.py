"""The models a benchmark compares, each a declared record, built as fairseq builds them."""
from dataclasses import dataclass
from pathlib import Path

import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_normformer  # noqa: F401  (registers our --arch names)
from fairseq_normformer.modules.operations import OPERATIONS, operations_in

NORMFORMER_FLAGS = ("--scale-attn", "--scale-fc", "--scale-heads")
PRE_LN = ("--decoder-normalize-before",)  # fairseq's transformer_lm is Post-LN by default (its GPT-3 presets set it)
BF16 = ("--bf16",)


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    purpose: str
    family: str  # "fairseq": fairseq's own transformer_lm; "ours": this plugin's models
    flags: tuple = ()
    devices: tuple = ("cpu", "cuda")
    fp32_variant: str = ""  # a --bf16 variant: the variant it is at bf16, timed in the same rounds

    def dtype(self, setup: "Setup") -> torch.dtype:
        """Under --bf16 fairseq's Trainer casts model and criterion with .to(dtype=torch.bfloat16) (its
        FP16Optimizer keeps fp32 master weights, outside a forward+backward step)."""
        return torch.bfloat16 if "--bf16" in self.flags else setup.dtype


VARIANTS = (
    Variant("fairseq_transformer_lm", "fairseq transformer_lm (Pre-LN)",
            "fairseq's own Pre-LN LM, the reference implementation", "fairseq", PRE_LN),
    Variant("fairseq_scale_flags", "fairseq transformer_lm + --scale-attn --scale-fc --scale-heads",
            "fairseq's own NormFormer, built through argparse (the one path on which its flags reach the layers)",
            "fairseq", PRE_LN + NORMFORMER_FLAGS),
    Variant("preln", "ours, Pre-LN baseline",
            "our baseline: what NormFormer's overhead is measured against", "ours", ("--layernorm-impl", "torch")),
    Variant("normformer", "ours, NormFormer (paper HeadScale)",
            "our NormFormer on the torch path, HeadScale at the paper's position (Eq. 3)", "ours",
            NORMFORMER_FLAGS + ("--layernorm-impl", "torch")),
    Variant("normformer_triton", "ours, NormFormer, fused Triton kernels",
            "our NormFormer with the fused activation→FFN-LN and LN kernels (GPU only)", "ours",
            NORMFORMER_FLAGS + ("--layernorm-impl", "triton"), devices=("cuda",)),
    Variant("preln_bf16", "ours, Pre-LN baseline, --bf16",
            "`preln` as `fairseq-train --bf16 --cpu` runs it: bfloat16 weights and activations (CPU only: the GPU "
            "setup is bf16 already)", "ours", ("--layernorm-impl", "torch") + BF16, devices=("cpu",),
            fp32_variant="preln"),
    Variant("normformer_bf16", "ours, NormFormer (paper HeadScale), --bf16",
            "`normformer` as `fairseq-train --bf16 --cpu` runs it (CPU only)", "ours",
            NORMFORMER_FLAGS + ("--layernorm-impl", "torch") + BF16, devices=("cpu",), fp32_variant="normformer"),
)  # fmt: skip
BY_NAME = {v.name: v for v in VARIANTS}


@dataclass(frozen=True)
class Setup:
    archs: dict  # family -> --arch
    shape_flags: tuple
    seq_len: int
    batch: int
    dtype: torch.dtype
    steps_per_timing: int
    matmul_size: int  # n of the n×n×n matrix multiply that measures the machine's peak

    def arch(self, variant: Variant) -> str:
        return self.archs[variant.family]

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len


SETUPS = {
    "cpu": Setup(
        archs={"fairseq": "transformer_lm", "ours": "normformer_lm"},
        shape_flags=("--decoder-layers", "6", "--decoder-embed-dim", "512", "--decoder-ffn-embed-dim", "2048",
                     "--decoder-attention-heads", "8", "--activation-fn", "gelu",
                     "--share-decoder-input-output-embed"),
        seq_len=256, batch=8, dtype=torch.float32, steps_per_timing=1, matmul_size=2048,
    ),
    "cuda": Setup(
        archs={"fairseq": "transformer_lm_gpt3_small", "ours": "preln_lm_gpt3_small"},
        shape_flags=(), seq_len=2048, batch=8, dtype=torch.bfloat16, steps_per_timing=5, matmul_size=8192,
    ),
}  # fmt: skip


def variants_for(device: str) -> list:
    return [v for v in VARIANTS if device in v.devices]


def parse_training_args(data_dir: Path, arch: str, flags, seq_len: int):
    parser = options.get_training_parser()
    argv = [str(data_dir), "--task", "language_modeling", "--arch", arch, "--tokens-per-sample", str(seq_len)]
    return options.parse_args_and_arch(parser, argv + list(flags))


def build_model(variant: Variant, setup: Setup, data_dir: Path):
    """``build_unchecked``, then the check that layer 0 has the operations the variant's flags ask for."""
    model = build_unchecked(variant, setup, data_dir)
    check_operations(variant, model)
    return model


def build_unchecked(variant: Variant, setup: Setup, data_dir: Path):
    """fairseq's model from the argparse Namespace (the one path on which its --scale-* flags take
    effect); ours through omegaconf, exactly as fairseq-train builds it. ``data_dir`` holds dict.txt."""
    args = parse_training_args(data_dir, setup.arch(variant), setup.shape_flags + variant.flags, setup.seq_len)
    task = tasks.setup_task(args)
    return task.build_model(convert_namespace_to_omegaconf(args).model if variant.family == "ours" else args)


def check_operations(variant: Variant, model):
    """Fail loudly unless layer 0 has exactly the operations the variant's flags ask for (read
    through the operations table, in fairseq's parameter names for fairseq's own model)."""
    built = {field for field, on in layer_operations(model.state_dict(), variant.family == "fairseq").items() if on}
    asked = {op.field for op in OPERATIONS if op.flag in variant.flags}
    if built != asked:
        raise RuntimeError(f"{variant.name}: the flags ask for {sorted(asked)} but the layers have {sorted(built)}")


def layer_operations(state_dict, fairseq: bool) -> dict:
    """{switch: present} of the first transformer layer of a model's state dict."""
    prefix = "decoder.layers.0."
    return operations_in([k[len(prefix) :] for k in state_dict if k.startswith(prefix)], fairseq=fairseq)


# Normalization schemes and the fused FFN LN (issue 41; docs/benchmarks.md): the recipes' `small` causal LM
# (recipes/_lm_common.sh: 4 layers x 256, 4 heads, FFN 1024, ReLU, dropout 0.1, 16 x 128 tokens), fp32.
# The operation check does not apply (an RMSNorm has no bias, so the table's LayerNorm rows do not match it);
# tests/benchmarks/test_variants.py checks what these build.
SMALL = Setup(
    archs={"ours": "normformer_lm"},
    shape_flags=("--decoder-layers", "4", "--decoder-embed-dim", "256", "--decoder-ffn-embed-dim", "1024",
                 "--decoder-attention-heads", "4", "--share-decoder-input-output-embed", "--dropout", "0.1",
                 "--attention-dropout", "0.1", "--layernorm-impl", "torch"),
    seq_len=128, batch=16, dtype=torch.float32, steps_per_timing=1, matmul_size=2048,
)  # fmt: skip
SMALL_VOCAB = 2100  # symbols of the benchmark's dictionary (the small recipe's 2000-piece corpus has about that)
COMPILE = ("--ffn-norm-impl", "compile")
FFN_NOBIAS, FFN_RMSNORM = ("--ffn-norm-type", "layernorm_nobias"), ("--ffn-norm-type", "rmsnorm")


def _scheme(name: str, label: str, purpose: str, flags: tuple = ()) -> Variant:
    return Variant(name, label, purpose, "ours", flags, devices=("cpu",))


NORM_SCHEME_VARIANTS = (
    _scheme("preln", "Pre-LN", "the baseline every ratio is to"),
    _scheme("normformer", "NormFormer", "FC1, then activation + FFN LN as one autograd function (the default)",
            NORMFORMER_FLAGS),
    _scheme("normformer_compiled", "NormFormer, FC1 + act + FFN LN compiled", "the paper's suggested fusion",
            NORMFORMER_FLAGS + COMPILE),
    _scheme("normformer_nobias", "NormFormer, FFN LN without bias", "FC1, activation, FFN LN: three ops",
            NORMFORMER_FLAGS + FFN_NOBIAS),
    _scheme("normformer_nobias_compiled", "NormFormer, FFN LN without bias, compiled", "the fusion",
            NORMFORMER_FLAGS + FFN_NOBIAS + COMPILE),
    _scheme("normformer_rmsnorm", "NormFormer, FFN RMSNorm", "FC1, activation, FFN RMSNorm: three ops",
            NORMFORMER_FLAGS + FFN_RMSNORM),
    _scheme("normformer_rmsnorm_compiled", "NormFormer, FFN RMSNorm, compiled", "the fusion",
            NORMFORMER_FLAGS + FFN_RMSNORM + COMPILE),
    _scheme("postln", "Post-LN", "LN(x + f(x))", ("--post-ln",)),
    _scheme("sandwich", "Sandwich norm", "x + N(f(N(x)))", ("--sandwich-norm",)),
    _scheme("qknorm", "QK-norm", "per-head norms of q and k", ("--qk-norm",)),
    _scheme("rmsnorm", "RMSNorm", "every norm an RMSNorm", ("--norm-type", "rmsnorm")),
    _scheme("dyt", "DyT", "every norm tanh(αx)·γ + β", ("--norm-type", "dyt")),
    _scheme("deepnorm", "DeepNorm", "Post-LN, LN(αx + f(x)), β-scaled init", ("--post-ln", "--deepnorm")),
)  # fmt: skip


# LaMBERT against a BERT-base-shaped encoder (docs/benchmarks.md, "LaMBERT against BERT").
LAMBERT_ARCHS = {"lambert_base": "LaMBERT-base (12 layers, 768, 12 heads, S = M = 23)",
                 "postln_bert_base": "BERT-base shape (Post-LN, 512 positions)"}  # fmt: skip
LAMBERT_TOKENS_PER_SAMPLE = 509  # (S - 1)·M + 3: pairs that fit LaMBERT's 23 segments; BERT's 512 positions too


def build_pair_model(arch: str, data_dir: Path, flags=()):
    """A masked LM with an NSP head and its ``mlm_nsp`` task, built as fairseq-train builds them."""
    parser = options.get_training_parser()
    argv = [str(data_dir), "--task", "mlm_nsp", "--arch", arch, "--tokens-per-sample", str(LAMBERT_TOKENS_PER_SAMPLE)]
    args = options.parse_args_and_arch(parser, argv + list(flags))
    task = tasks.setup_task(args)
    return task, task.build_model(convert_namespace_to_omegaconf(args).model)

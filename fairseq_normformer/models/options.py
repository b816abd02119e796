"""The NormFormer command-line options, one declaration each, for every model.

The switches (``--scale-attn`` ... ``--post-ln``) are generated from the operations table
(modules/operations.py), with its help. A model with a config dataclass puts ``NormFormerOptions``
*first* in its bases, so these fields and help replace fairseq's own ``scale_*`` declarations; an
argparse model (RoBERTa/BERT) calls ``add_normformer_args``. An encoder-decoder does either and
builds both sides with ``LayerConfig.from_model_cfg(cfg, "encoder"/"decoder", ...)``.
"""
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.utils import safe_getattr

from ..modules import HEAD_SCALE_POSITIONS, LAYERNORM_IMPLS
from ..modules.compiled_ffn_norm import FFN_NORM_IMPLS
from ..modules.operations import ENCODER_ATTENTION_OPERATIONS, FFN_NORM_TYPES, NORM_TYPES, SWITCHES

NormFormerSwitches = make_dataclass(
    "NormFormerSwitches",
    [(op.field, bool, field(default=False, metadata={"help": op.help})) for op in SWITCHES],
    bases=(FairseqDataclass,),
)


@dataclass
class NormFormerOptions(NormFormerSwitches):
    head_scale_position: ChoiceEnum(HEAD_SCALE_POSITIONS) = field(
        default="paper",
        metadata={
            "help": "where --scale-heads applies γ: 'paper' scales each head's output before "
            "W^O (Eq. 3); 'after_wo' reproduces fairseq's built-in (chunks of W^O's output)"
        },
    )
    layernorm_impl: ChoiceEnum(LAYERNORM_IMPLS) = field(
        default="auto", metadata={"help": "LayerNorm implementation; 'auto' picks the fastest available"}
    )
    ffn_norm_impl: ChoiceEnum(FFN_NORM_IMPLS) = field(
        default="eager",
        metadata={"help": "how FC1 -> activation -> FFN LN (--scale-fc) runs: eager, or compile (torch.compile of "
                  "the three as one op, the paper's suggested fusion; its kind layernorm, layernorm_nobias or "
                  "rmsnorm, no activation dropout); docs/kernels.md"},
    )  # fmt: skip
    norm_type: ChoiceEnum(NORM_TYPES) = field(
        default="layernorm",
        metadata={"help": "the kind of every norm in the model (layers, embedding, final, LM head): LayerNorm, "
                  "RMSNorm (Zhang & Sennrich 2019) or DyT, tanh(αx)·γ+β (Zhu et al. 2025); docs/model.md"},
    )  # fmt: skip
    ffn_norm_type: Optional[ChoiceEnum(FFN_NORM_TYPES)] = field(
        default=None,
        metadata={"help": "the kind of NormFormer's FFN LN (--scale-fc) alone, default --norm-type: the paper's "
                  "'with or without the mean centering and bias' (layernorm_nobias, rmsnorm)"},
    )  # fmt: skip
    normformer_layers: str = field(
        default="all",
        metadata={"help": "which layers have the NormFormer paper's operations (--scale-*): all, first:K, "
                  "last:K or 0-based indices such as 0,3,5"},
    )  # fmt: skip
    post_ln_layers: Optional[str] = field(
        default=None,
        metadata={"help": "Mix-LN (Li et al. 2024): these layers Post-LN, the others Pre-LN (without --post-ln): "
                  "first:K (the paper's early layers), last:K, all or 0-based indices such as 0,3,5"},
    )  # fmt: skip
    rezero: bool = field(
        default=False,
        metadata={"help": "ReZero (Bachlechner et al. 2021): no norms (the layers', the final, the embedding and LM "
                  "head's), each sublayer x + α·f(x) with α one learned scalar per layer, initialised to 0"},
    )  # fmt: skip
    reordered_norm: bool = field(
        default=False,
        metadata={"help": "OLMo 2's norm order: x + N(f(x)) in each sublayer, a norm on its output only and none on "
                  "its input (the sandwich norm's output norms, without its input norms); Pre-LN stacks"},
    )  # fmt: skip
    dyt_alpha: Optional[str] = field(
        default=None,
        metadata={"help": "DyT's α₀ per position, ATTN,FFN,FINAL: the attention sublayers' norms, the FFN's, the "
                  "final norm (the DyT paper's 7B: 0.8,0.2,0.2); the other norms keep 0.5; needs --norm-type dyt"},
    )  # fmt: skip
    ln_scaling: bool = field(
        default=False,
        metadata={"help": "LayerNorm Scaling (Sun et al. 2025): each Pre-LN sublayer norm's output × 1/sqrt(l), "
                  "l the layer's 1-based index"},
    )  # fmt: skip


# normformer_transformer only: the encoder-attention operations, our extension (not in the paper).
EncoderAttentionSwitches = make_dataclass(
    "EncoderAttentionSwitches",
    [(op.field, bool, field(default=False, metadata={"help": op.help})) for op in ENCODER_ATTENTION_OPERATIONS],
    bases=(FairseqDataclass,),
)


def add_normformer_args(parser, options_class=NormFormerOptions):
    """The options for an argparse model, without defaults so that presets can fill what is unset."""
    gen_parser_from_dataclass(parser, options_class(), delete_default=True)


def fill_option_defaults(args, options_class=NormFormerOptions):
    """An argparse model's base architecture: each option the user and the preset left unset gets its default."""
    for option in fields(options_class):
        if not option.name.startswith("_"):
            setattr(args, option.name, safe_getattr(args, option.name, option.default))

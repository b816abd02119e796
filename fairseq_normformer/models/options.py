"""The NormFormer command-line options, one declaration each, for every model.

The switches (``--scale-attn`` ... ``--post-ln``) are generated from the operations table
(modules/operations.py), with its help. A model with a config dataclass puts ``NormFormerOptions``
*first* in its bases, so these fields and help replace fairseq's own ``scale_*`` declarations; an
argparse model (RoBERTa/BERT) calls ``add_normformer_args``. An encoder-decoder does either and
builds both sides with ``LayerConfig.from_model_cfg(cfg, "encoder"/"decoder", ...)``.
"""
from dataclasses import dataclass, field, fields, make_dataclass

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.utils import safe_getattr

from ..modules import HEAD_SCALE_POSITIONS, LAYERNORM_IMPLS
from ..modules.operations import ENCODER_ATTENTION_OPERATIONS, SWITCHES

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

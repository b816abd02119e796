"""The NormFormer command-line options, one declaration each, for every model.

The switches (``--scale-attn`` ... ``--post-ln``) are generated from the operations table
(modules/operations.py), with its help. A model with a config dataclass puts ``NormFormerOptions``
*first* in its bases, so these fields and help replace fairseq's own ``scale_*`` declarations; an
argparse model (RoBERTa/BERT) calls ``add_normformer_args``. An encoder-decoder does either and
builds both sides with ``LayerConfig.from_model_cfg(cfg, "encoder"/"decoder", ...)``.
"""
from dataclasses import dataclass, field, make_dataclass

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass

from ..modules import HEAD_SCALE_POSITIONS, LAYERNORM_IMPLS
from ..modules.operations import SWITCHES

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


def add_normformer_args(parser):
    """The options for an argparse model, without defaults so that presets can fill what is unset."""
    gen_parser_from_dataclass(parser, NormFormerOptions(), delete_default=True)

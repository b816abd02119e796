"""Command-line options shared by the NormFormer causal and masked LMs.

fairseq's own ``--scale-attn/--scale-fc/--scale-heads/--scale-resids`` keep their names (declared
by fairseq's TransformerLanguageModelConfig); the fields below are the ones fairseq lacks.
"""
from dataclasses import dataclass, field

from fairseq.dataclass import ChoiceEnum

from ..modules import HEAD_SCALE_POSITIONS, LAYERNORM_IMPLS


@dataclass
class NormFormerOptions:
    scale_qkv: bool = field(
        default=False,
        metadata={"help": "LayerNorm on the projected q, k and v (Table 5, '+3 More LN')"},
    )
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

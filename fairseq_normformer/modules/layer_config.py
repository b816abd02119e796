"""The settings one NormFormer layer needs, gathered from a model's flat fairseq config."""
from dataclasses import dataclass, make_dataclass

from fairseq import utils

from .operations import ENCODER_ATTENTION_OPERATIONS, OPERATIONS

LAYER_SWITCHES = OPERATIONS + ENCODER_ATTENTION_OPERATIONS  # the encoder-attention ones act in cross-attention layers only

HEAD_SCALE_POSITIONS = ["paper", "after_wo"]
# fairseq's get_activation_fn knows relu_squared (the authors' 2.7B NormFormer) but does not list it.
ACTIVATIONS = utils.get_available_activation_fns() + ["relu_squared"]


# One keyword-only boolean per row of the operations table (Fig. 1 and Table 5): scale_attn, ...
OperationSwitches = make_dataclass(
    "OperationSwitches", [(op.field, bool, False) for op in LAYER_SWITCHES], kw_only=True
)


@dataclass
class LayerConfig(OperationSwitches):
    embed_dim: int
    ffn_embed_dim: int
    attention_heads: int
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation_fn: str = "gelu"
    normalize_before: bool = True  # True: Pre-LN; False: Post-LN (Xiong et al. 2020)
    causal: bool = True  # decoder (causal LM) or encoder (masked LM)
    head_scale_position: str = "paper"  # "paper": before W^O; "after_wo": fairseq's variant
    layernorm_impl: str = "torch"

    def __post_init__(self):
        if self.embed_dim % self.attention_heads != 0:
            raise ValueError(
                f"embedding dim {self.embed_dim} is not divisible by the number of "
                f"attention heads {self.attention_heads}"
            )
        if self.head_scale_position not in HEAD_SCALE_POSITIONS:
            raise ValueError(
                f"--head-scale-position={self.head_scale_position!r} is not one of "
                f"{', '.join(HEAD_SCALE_POSITIONS)}"
            )
        if self.activation_fn not in ACTIVATIONS:
            raise ValueError(f"--activation-fn={self.activation_fn!r} is not one of {', '.join(ACTIVATIONS)}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(self, name)}")

    @classmethod
    def from_model_cfg(cls, cfg, side: str, normalize_before: bool, causal: bool, layernorm_impl: str):
        """Read ``{side}_embed_dim`` etc. and the NormFormer switches from a flat model config.

        An encoder-decoder builds both sides from the same switches: ``side`` is "encoder" or "decoder"."""
        get = lambda name, default=None: utils.safe_getattr(cfg, name, default)  # noqa: E731
        return cls(
            embed_dim=get(f"{side}_embed_dim"),
            ffn_embed_dim=get(f"{side}_ffn_embed_dim"),
            attention_heads=get(f"{side}_attention_heads"),
            dropout=get("dropout", 0.0),
            attention_dropout=get("attention_dropout", 0.0),
            activation_dropout=get("activation_dropout", 0.0) or get("relu_dropout", 0.0) or 0.0,
            activation_fn=get("activation_fn", "gelu"),
            normalize_before=normalize_before,
            causal=causal,
            head_scale_position=get("head_scale_position", "paper"),
            layernorm_impl=layernorm_impl,
            **{op.field: bool(get(op.field, False)) for op in LAYER_SWITCHES},
        )

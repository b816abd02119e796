"""The settings one NormFormer layer needs, gathered from a model's flat fairseq config."""
import re
from dataclasses import dataclass, make_dataclass, replace
from typing import Optional, Tuple

from fairseq import utils

from ..checks import BadInput
from .compiled_ffn_norm import COMPILABLE_KINDS, FFN_NORM_IMPLS
from .deepnorm import check_deepnorm, deepnorm_constants
from .operations import ENCODER_ATTENTION_OPERATIONS, FFN_NORM_TYPES, NORM_TYPES, OPERATIONS

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
    norm_type: str = "layernorm"  # every norm's kind (operations.NORM_KINDS)
    ffn_norm_type: Optional[str] = None  # the FFN LN's kind; None: norm_type
    ffn_norm_impl: str = "eager"  # FC1 -> activation -> FFN LN: "eager", or "compile" (one torch.compile'd op)
    normformer_layers: str = "all"  # which layers of a stack have the paper's operations (layers_of_spec)
    deepnorm_alpha: Optional[float] = None  # DeepNorm's residual scale α (modules/deepnorm.py); None: off
    deepnorm_beta: Optional[float] = None  # and its init scale β
    post_ln_layers: Optional[str] = None  # Mix-LN: the layers that are Post-LN (layers_of_spec); None: none
    ln_scaling: bool = False  # LayerNorm Scaling: each Pre-LN norm's output × 1/sqrt(layer_number)
    layer_number: int = 1  # the layer's 1-based index in its stack (set by for_layer)
    rezero: bool = False  # ReZero: no norm around the sublayers, x + α f(x) with α a learned scalar, init 0
    reordered_norm: bool = False  # OLMo 2's order: x + N(f(x)), a norm on each sublayer's output only
    dyt_alpha: Optional[Tuple[float, float, float]] = None  # DyT's α₀ of the attention, FFN and final norms

    @property
    def sublayer_norm_kind(self) -> str:
        """The kind of each sublayer's own norm (Pre-LN: on its input; Post-LN: after the residual add): none
        with --rezero and --reordered-norm."""
        return "none" if self.rezero or self.reordered_norm else self.norm_type

    @property
    def stack_norm_kind(self) -> str:
        """The kind of the stack's final and embedding norms and of the LM head's: none with --rezero."""
        return "none" if self.rezero else self.norm_type

    @property
    def output_norms(self) -> bool:
        """A norm on each sublayer's output, before the residual add: the sandwich norm's and OLMo 2's."""
        return self.sandwich_norm or self.reordered_norm

    @property
    def ffn_norm_kind(self) -> str:
        return self.ffn_norm_type or self.norm_type

    def for_layer(self, index: int, num_layers: int) -> "LayerConfig":
        """Layer ``index``'s settings: its 1-based number; without the NormFormer paper's operations where
        --normformer-layers leaves it out (the later schemes, --qk-norm and --sandwich-norm, act in every
        layer); Post-LN where --post-ln-layers puts it (Mix-LN)."""
        paper_ops = index in layers_of_spec(self.normformer_layers, num_layers)
        post_ln = index in (self.post_ln_layer_indices(num_layers) or ())
        return replace(
            self,
            layer_number=index + 1,
            normalize_before=self.normalize_before and not post_ln,
            **({} if paper_ops else {op.field: False for op in OPERATIONS if op.normformer_paper}),
        )

    def normformer_layer_indices(self, num_layers: int) -> Optional[list]:
        """The layers of a stack of ``num_layers`` that have the paper's operations; None: all of them."""
        return None if self.normformer_layers == "all" else list(layers_of_spec(self.normformer_layers, num_layers))

    def post_ln_layer_indices(self, num_layers: int) -> Optional[list]:
        """Mix-LN's Post-LN layers of a stack of ``num_layers``; None without --post-ln-layers."""
        if self.post_ln_layers is None:
            return None
        return list(layers_of_spec(self.post_ln_layers, num_layers, "--post-ln-layers"))

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
        if self.norm_type not in NORM_TYPES:
            raise BadInput(f"--norm-type={self.norm_type!r} is not one of {', '.join(NORM_TYPES)}")
        if self.ffn_norm_type is not None and self.ffn_norm_type not in FFN_NORM_TYPES:
            raise BadInput(f"--ffn-norm-type={self.ffn_norm_type!r} is not one of {', '.join(FFN_NORM_TYPES)}")
        self._check_ffn_norm_impl()
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(self, name)}")

    def _check_ffn_norm_impl(self):
        if self.ffn_norm_impl not in FFN_NORM_IMPLS:
            raise BadInput(f"--ffn-norm-impl={self.ffn_norm_impl!r} is not one of {', '.join(FFN_NORM_IMPLS)}")
        if self.ffn_norm_impl != "compile" or not self.scale_fc:
            return
        if self.ffn_norm_kind not in COMPILABLE_KINDS:
            raise BadInput(f"--ffn-norm-impl compile fuses an FFN norm of kind {', '.join(COMPILABLE_KINDS)}, "
                           f"not {self.ffn_norm_kind} (set --ffn-norm-type)")  # fmt: skip
        if self.activation_dropout:
            raise BadInput("--ffn-norm-impl compile has no activation dropout: use --activation-dropout 0")

    @classmethod
    def from_model_cfg(cls, cfg, side: str, normalize_before: bool, causal: bool, layernorm_impl: str,
                       encoder_decoder: bool = False):  # fmt: skip
        """Read ``{side}_embed_dim`` etc. and the NormFormer switches from a flat model config.

        An encoder-decoder builds both sides from the same switches: ``side`` is "encoder" or "decoder"."""
        get = lambda name, default=None: utils.safe_getattr(cfg, name, default)  # noqa: E731
        deepnorm = (None, None)
        if get("deepnorm", False):
            check_deepnorm(normalize_before)
            stack = side if encoder_decoder else f"{side}-only"
            deepnorm = deepnorm_constants(stack, get("encoder_layers"), get("decoder_layers"))
        layers = get(f"{side}_layers")
        spec = str(get("normformer_layers", "all"))
        if spec != "all":
            layers_of_spec(spec, layers)  # a bad spec fails here, before anything is built
        check_pre_ln_schemes(get, normalize_before)
        post_ln_layers = get("post_ln_layers") and str(get("post_ln_layers"))
        if post_ln_layers is not None:
            layers_of_spec(post_ln_layers, layers, "--post-ln-layers")
        dyt_alpha = get("dyt_alpha") and parse_dyt_alpha(str(get("dyt_alpha")), str(get("norm_type", "layernorm")),
                                                         bool(get("rezero", False) or get("reordered_norm", False)))
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
            norm_type=str(get("norm_type", "layernorm")),
            ffn_norm_type=get("ffn_norm_type") and str(get("ffn_norm_type")),
            ffn_norm_impl=str(get("ffn_norm_impl", "eager")),
            normformer_layers=spec,
            deepnorm_alpha=deepnorm[0],
            deepnorm_beta=deepnorm[1],
            post_ln_layers=post_ln_layers,
            ln_scaling=bool(get("ln_scaling", False)),
            rezero=bool(get("rezero", False)),
            reordered_norm=bool(get("reordered_norm", False)),
            dyt_alpha=dyt_alpha,
            **{op.field: bool(get(op.field, False)) for op in LAYER_SWITCHES},
        )


# The schemes that act on a Pre-LN stack only: what each says to a Post-LN one (--post-ln).
PRE_LN_SCHEMES = {
    "post_ln_layers": "--post-ln-layers makes some layers of a Pre-LN stack Post-LN (Mix-LN): drop --post-ln",
    "ln_scaling": "--ln-scaling scales the Pre-LN norms' outputs; a Post-LN stack has none: drop --post-ln",
    "rezero": "--rezero has no norms, so nothing to place after the residual add: drop --post-ln",
    "reordered_norm": "--reordered-norm puts the norm on each sublayer's output (x + N(f(x))): drop --post-ln",
}


def check_pre_ln_schemes(get, normalize_before: bool) -> None:
    """A Pre-LN-only scheme set on a Post-LN stack is refused in one line; ``get(field)`` reads the model config."""
    for name, refusal in PRE_LN_SCHEMES.items():
        if get(name) and not normalize_before:
            raise BadInput(refusal)


def parse_dyt_alpha(spec: str, norm_type: str, no_input_norms: bool) -> Tuple[float, float, float]:
    """--dyt-alpha ATTN,FFN,FINAL -> (α₀ of the attention sublayers' norms, the FFN's, the final norm's)."""
    if norm_type != "dyt" or no_input_norms:
        raise BadInput("--dyt-alpha sets the α₀ of DyT's sublayer and final norms: it needs --norm-type dyt "
                       "(and no --rezero or --reordered-norm)")  # fmt: skip
    values = re.fullmatch(r"([\d.eE+-]+),([\d.eE+-]+),([\d.eE+-]+)", spec)
    try:
        return tuple(float(v) for v in values.groups())
    except (AttributeError, ValueError):
        raise BadInput(f"--dyt-alpha {spec!r}: expected three numbers ATTN,FFN,FINAL such as 0.8,0.2,0.2") from None


def layers_of_spec(spec: str, num_layers: int, flag: str = "--normformer-layers") -> Tuple[int, ...]:
    """--normformer-layers, --post-ln-layers: ``all``, ``first:K``, ``last:K`` or 0-based indices ``0,3,5``
    -> the layers."""
    if spec == "all":
        return tuple(range(num_layers))
    every = range(num_layers)
    bounded = re.fullmatch(r"(first|last):(\d+)", spec)
    if bounded and int(bounded[2]) <= num_layers:
        k = int(bounded[2])
        return tuple(every[:k] if bounded[1] == "first" else every[num_layers - k :])
    indices = re.fullmatch(r"\d+(,\d+)*", spec) and sorted({int(i) for i in spec.split(",")})
    if not bounded and indices and indices[-1] < num_layers:
        return tuple(indices)
    raise BadInput(
        f"{flag} {spec!r}: expected all, first:K, last:K (K <= {num_layers}) or layer indices "
        f"0..{num_layers - 1} such as 0,3,5"
    )

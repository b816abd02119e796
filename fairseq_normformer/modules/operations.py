"""Every NormFormer layer operation, one row each (Shleifer, Weston, Ott 2021, Fig. 1 and Table 5).

The rows are the one place that names an operation's switch, parameters, paper reference and help.
The command-line options (models/options.py), ``LayerConfig``, the presets, the parameter groups of
the analysis tools, the fairseq checkpoint converter, the HuggingFace export check and the table of
docs/model.md are all derived from them. Adding an operation: one row here, its module code in
normformer_layer.py/attention.py, its tests.
"""
import re
from dataclasses import dataclass
from typing import Optional, Tuple

from ..hf.norm_kinds import NORM_KINDS


@dataclass(frozen=True)
class Operation:
    label: str  # the paper's name
    paper: str  # where the paper defines it
    field: str  # config / LayerConfig field; the flag is --field-with-dashes
    params: Tuple[str, ...]  # parameter paths inside one layer
    per_layer: str  # parameters per layer in d (model dim), f (FFN dim), H (heads), h (head dim d/H): "2d", "H", "0"
    follows: Optional[str]  # the module it comes after in the layer's data flow (baseline or an earlier row's)
    code: str  # where it lives
    help: str
    in_fairseq: bool = True  # fairseq's own layer has its parameters (--scale-* of transformer_lm)
    fairseq_alias: Optional[str] = None  # fairseq's name for the one parameter, where it differs
    in_normformer: bool = False  # one of the paper's three operations (the normformer_* presets)
    gamma: Optional[str] = None  # its learned scale (Fig. 4)
    gamma_symbol: str = "γ"
    normformer_paper: bool = True  # the NormFormer paper's; --normformer-layers decides which layers have it

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    @property
    def fairseq_params(self) -> Optional[Tuple[str, ...]]:
        """fairseq's names for ``params``; None when fairseq lacks the operation."""
        if not self.in_fairseq:
            return None
        return (self.fairseq_alias,) if self.fairseq_alias else self.params

    @property
    def gamma_label(self) -> str:
        return f"{self.label} {self.gamma_symbol}"

    @property
    def modules(self) -> Tuple[str, ...]:
        """Module paths of ``params`` (a bare parameter such as ``w_resid`` is its own module)."""
        paths = (p.rsplit(".", 1)[0] if p.endswith((".weight", ".bias")) else p for p in self.params)
        return tuple(dict.fromkeys(paths))

    def num_params(self, d: int, f: int, heads: int) -> int:
        coefficient, symbol = re.fullmatch(r"(\d*)([dfHh]?)", self.per_layer).groups()
        return int(coefficient or 1) * {"d": d, "f": f, "H": heads, "h": d // heads, "": 1}[symbol]


def _ln(path: str) -> Tuple[str, ...]:
    return (f"{path}.weight", f"{path}.bias")


# In the order they act in the layer.
OPERATIONS = (
    Operation(
        "QKV LN", 'Table 5, "+3 More LN"', "scale_qkv", per_layer="6d", follows="self_attn.v_proj",
        params=_ln("self_attn.q_ln") + _ln("self_attn.k_ln") + _ln("self_attn.v_ln"), in_fairseq=False,
        code="`SelfAttention.q_ln/k_ln/v_ln`",
        help="LayerNorm on the projected queries, keys and values (Table 5, '+3 More LN')",
    ),
    Operation(
        "QK-norm", "Henry et al. 2020; per head as ViT-22B", "qk_norm", per_layer="4h", follows="self_attn.k_ln",
        params=_ln("self_attn.q_norm") + _ln("self_attn.k_norm"), in_fairseq=False, normformer_paper=False,
        code="`SelfAttention.q_norm/k_norm`",
        help="QK-norm (Henry et al. 2020): a norm (--norm-type) over each head's query and key, shared by "
        "the heads, before the dot product (not in the NormFormer paper; see --scale-qkv for its LN on all of q, k, v)",
    ),
    Operation(
        "HeadScale", "Eq. 3", "scale_heads", params=("self_attn.head_scale",), per_layer="H", follows="self_attn.v_ln",
        fairseq_alias="c_attn", in_normformer=True, gamma="self_attn.head_scale",
        code="`SelfAttention.head_scale`, `SelfAttention._output_projection`",
        help="NormFormer HeadScale (Eq. 3): a learned scale γ_i on each attention head's output "
        "(see --head-scale-position)",
    ),
    Operation(
        "Post-Attn LN", "Fig. 1", "scale_attn", params=_ln("attn_ln"), per_layer="2d", follows="self_attn.out_proj",
        in_normformer=True, gamma="attn_ln.weight", code="`NormFormerLayer.attn_ln`",
        help="NormFormer Post-Attn LN (Fig. 1): LayerNorm on the self-attention output, before the residual add",
    ),
    Operation(
        "FFN LN", "Fig. 1", "scale_fc", params=_ln("ffn_layernorm"), per_layer="2f", follows="fc1",
        in_normformer=True, gamma="ffn_layernorm.weight", code="`NormFormerLayer.ffn_layernorm`",
        help="NormFormer FFN LN (Fig. 1): LayerNorm after the FFN activation, before FC2",
    ),
    Operation(
        "ResScale", "§2", "scale_resids", params=("w_resid",), per_layer="d", follows="fc2",
        gamma="w_resid", gamma_symbol="λ_resid", code="`NormFormerLayer.w_resid`",
        help="ResScale (§2): a learned λ_resid ⊙ x on the FFN residual only, as the authors' fairseq code",
    ),
    Operation(
        "Sandwich LN", "CogView, Ding et al. 2021; Peri-LN, Kim et al. 2025", "sandwich_norm", per_layer="4d",
        params=_ln("attn_ln") + _ln("ffn_out_ln"), follows="fc2", in_fairseq=False, normformer_paper=False,
        code="`NormFormerLayer.attn_ln` (Post-Attn LN's), `NormFormerLayer.ffn_out_ln`",
        help="sandwich norm (CogView; Peri-LN): a norm on each sublayer's output before the residual add; its "
        "attention half is --scale-attn's Post-Attn LN (the same module), so with --scale-attn it adds 2d, not 4d",
    ),
)  # fmt: skip

# Pre-LN (the default, Fig. 1 left) or Post-LN: where every layer's two LayerNorms sit. No parameters.
POST_LN = Operation(
    "Post-LN baseline", "Xiong et al. 2020", "post_ln", params=(), per_layer="0", follows=None, in_fairseq=False,
    code="`NormFormerLayer._sublayer`: `LN(x + f(x))` instead of Pre-LN's `x + f(LN(x))`, no final LN",
    help="Post-LN layers (LayerNorm after each residual add, Xiong et al. 2020) instead of Pre-LN",
)  # fmt: skip
# DeepNorm (Wang et al. 2022): Post-LN with x_{l+1} = LN(α x_l + G(x_l)) and the init of W^V, W^O, FC1, FC2
# times β; α, β from the depth (DeepNet Table 1, modules/deepnorm.py). No parameters.
DEEPNORM = Operation(
    "DeepNorm", "Wang et al. 2022, Table 1", "deepnorm", params=(), per_layer="0", follows=None, in_fairseq=False,
    normformer_paper=False, code="`NormFormerLayer._sublayer` (α), `modules/deepnorm.py` (α, β; the β init)",
    help="DeepNorm (Wang et al. 2022), with --post-ln: LN(α·x + f(x)) and the initial W^V, W^O, FC1, FC2 times β, "
    "α and β from the number of layers (DeepNet Table 1)",
)  # fmt: skip
SWITCHES = OPERATIONS + (POST_LN, DEEPNORM)  # every boolean layer option of the command line

# Our extension, NOT in the paper: NormFormer's attention operations on the decoder's encoder attention
# (normformer_transformer only; the paper has no encoder-decoder). Off in every preset.
ENCODER_ATTENTION_OPERATIONS = (
    Operation(
        "Enc-Attn HeadScale", "our extension of Eq. 3, not in the paper", "scale_enc_heads",
        params=("encoder_attn.head_scale",), per_layer="H", follows="encoder_attn.v_proj", in_fairseq=False,
        code="`EncoderAttention.head_scale`",
        help="our extension, not in the paper: HeadScale (Eq. 3) on the decoder's encoder attention "
        "(--head-scale-position applies)",
    ),
    Operation(
        "Post-Enc-Attn LN", "our extension of Fig. 1, not in the paper", "scale_enc_attn", params=_ln("enc_attn_ln"),
        per_layer="2d", follows="encoder_attn.out_proj", in_fairseq=False,
        code="`NormFormerCrossAttentionDecoderLayer.enc_attn_ln`",
        help="our extension, not in the paper: LayerNorm on the decoder's encoder-attention output, "
        "before the residual add",
    ),
)  # fmt: skip

# The baseline layer's modules in data-flow order (fairseq's TransformerDecoderLayer names).
BASELINE_MODULES = (
    "self_attn_layer_norm",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.out_proj",
    "final_layer_norm",
    "fc1",
    "fc2",
)


def layer_modules() -> Tuple[str, ...]:
    """Every module of a layer with all operations on, in data-flow order (each after ``follows``)."""
    order = list(BASELINE_MODULES)
    for op in OPERATIONS:  # rows are in data-flow order, so ``follows`` is already placed
        at = order.index(op.follows) + 1
        order[at:at] = [m for m in op.modules if m not in order]  # Sandwich LN shares Post-Attn LN's attn_ln
    return tuple(order)


def operations_in(layer_params, fairseq: bool = False) -> dict:
    """{field: whether one layer's parameter names (inside the layer, e.g. ``attn_ln.weight``) hold
    the operation}; with ``fairseq``, fairseq's names, and only the rows fairseq's layer has."""
    names = set(layer_params)
    rows = [op for op in OPERATIONS if not fairseq or op.fairseq_params is not None]
    return {op.field: set(op.fairseq_params if fairseq else op.params) <= names for op in rows}


def fairseq_renames() -> dict:
    """fairseq's parameter name -> ours, where they differ (fairseq calls HeadScale's γ ``c_attn``)."""
    return {
        theirs: ours
        for op in OPERATIONS
        if op.fairseq_params is not None
        for ours, theirs in zip(op.params, op.fairseq_params)
        if ours != theirs
    }


def added_gammas() -> dict:
    """Parameter path -> label of each operation's learned scale (Fig. 4)."""
    return {op.gamma: op.gamma_label for op in OPERATIONS if op.gamma is not None}


def markdown_table(rows=SWITCHES) -> str:
    """The "Where each operation lives" table of docs/model.md; with ``rows=ENCODER_ATTENTION_OPERATIONS``
    the encoder-attention extension's table of docs/translation.md (a decoder layer's parameters)."""
    lines = [
        "| paper | flag | code | parameters in a layer | per layer | fairseq's names | `normformer_*` presets |",
        "|---|---|---|---|---|---|---|",
    ]
    if rows is SWITCHES:
        lines.append(
            "| Pre-LN baseline (Fig. 1, left) | (default) | `NormFormerLayer._sublayer`: `x + f(LN(x))` | — | 0 | — | on |"
        )
    for op in rows:
        params = ", ".join(f"`{p}`" for p in op.params) or "—"
        theirs = _fairseq_names(op)
        lines.append(
            f"| {op.label} ({op.paper}) | `{op.flag}` | {op.code} | {params} | {op.per_layer} | {theirs} "
            f"| {'on' if op.in_normformer else '—'} |"
        )
    return "\n".join(lines) + "\n"


def _fairseq_names(op: Operation) -> str:
    if op.fairseq_params is None:
        return "—"
    if op.fairseq_params == op.params:
        return "same"
    return ", ".join(f"`{p}`" for p in op.fairseq_params)


NORM_TYPES = [kind.name for kind in NORM_KINDS.values() if "--norm-type" in kind.flags]
FFN_NORM_TYPES = [kind.name for kind in NORM_KINDS.values() if "--ffn-norm-type" in kind.flags]


def norm_kinds_table() -> str:
    """The "Kinds of norm" table of docs/model.md."""
    lines = ["| kind | paper | equation | parameters of a norm over n features | options |", "|---|---|---|---|---|"]
    for kind in NORM_KINDS.values():
        flags = ", ".join(f"`{flag} {kind.name}`" for flag in kind.flags)
        lines.append(f"| `{kind.name}` | {kind.paper} | `{kind.equation}` | {kind.per_norm} | {flags} |")
    return "\n".join(lines) + "\n"

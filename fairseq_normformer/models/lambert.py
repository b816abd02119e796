"""``lambert``: LaMBERT, segment-based input and two-phase attention (docs/lambert.md).

Takes fairseq's flat ``[CLS] A [SEP] B [SEP]`` batches (``mlm_nsp``, ``lambert_mlm_nsp``,
``sentence_prediction``) and lays them out as segments itself (modules/lambert_layer.py): [SEP]
only marks where B starts and is not part of the input. Embeddings: tokens + sentence (A/B) +
position within the segment; each segment embedding starts as the mean of its tokens' embeddings
+ segment position + sentence. Features come back in the flat layout (a [SEP] gets zeros, [CLS]
the phase-2 output), so fairseq's LM head, the ``mlm_nsp`` criterion and classification heads work
as for ``normformer_bert``, whose pooler, NSP head and pooler-initialised classification heads it keeps.
"""
from dataclasses import dataclass, field, fields

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr
from torch import Tensor, nn

from ..checks import BadInput
from ..data.nsp_pairs import NUM_SEGMENTS
from ..modules import LayerConfig
from ..modules.lambert_layer import SEGMENT_MAPS, LambertLayer, LambertLayerConfig, segment_layout
from .normformer_bert import NormFormerBertEncoder, NormFormerBertModel, postln_bert_base
from .normformer_lm import normformer_operations
from .normformer_roberta import NormFormerRobertaModel, preln_architecture
from .stacks import LayerStack, read_layer_config

SEGMENT_POSITIONS = ["global", "per-sentence"]
CLS_PHASES = ["every-layer", "final"]
SPECIAL_TOKENS_PER_PAIR = 3  # [CLS] A [SEP] B [SEP] in fairseq's flat layout


@dataclass
class LambertOptions(FairseqDataclass):
    segment_length: int = field(default=23, metadata={"help": "M: tokens per segment"})
    max_segments: int = field(default=23, metadata={"help": "S: segments per pair (A's and B's together)"})
    segment_map: ChoiceEnum(SEGMENT_MAPS) = field(
        default="relative",
        metadata={"help": "P_ij, how block i sees segment j: 'relative' s_j + r_(j-i) (a learned vector per "
                  "offset and layer), 'none' s_j"},
    )  # fmt: skip
    segment_positions: ChoiceEnum(SEGMENT_POSITIONS) = field(
        default="global",
        metadata={"help": "segment positional embedding index: 'global' counts A's then B's segments, "
                  "'per-sentence' restarts at 0 for B (the sentence embedding tells them apart)"},
    )  # fmt: skip
    cls_phase: ChoiceEnum(CLS_PHASES) = field(
        default="every-layer",
        metadata={"help": "phase 2: 'every-layer' [CLS] cross-attends in every layer and feeds the next; "
                  "'final' once, by one extra layer on the last segment embeddings"},
    )  # fmt: skip


def max_pair_tokens(segment_length: int, max_segments: int) -> int:
    """Tokens of A and B that always fit in S segments: ⌈a/M⌉ + ⌈b/M⌉ ≤ S whenever a + b ≤ (S-1)·M."""
    return (max_segments - 1) * segment_length


class LambertEmbeddings(nn.Module):
    """Token + sentence + token-position embeddings for the blocks; the segment embeddings' start."""

    def __init__(self, args, embed_tokens: nn.Embedding, norm: nn.Module):
        super().__init__()
        d = embed_tokens.embedding_dim
        self.embed_tokens = embed_tokens
        self.embed_sentences = nn.Embedding(NUM_SEGMENTS, d)
        self.embed_token_positions = nn.Embedding(args.segment_length, d)
        self.embed_segment_positions = nn.Embedding(args.max_segments, d)
        self.per_sentence_positions = args.segment_positions == "per-sentence"
        self.layernorm = norm
        self.dropout_module = FairseqDropout(args.dropout, module_name=type(self).__name__)

    def forward(self, src_tokens: Tensor, layout, pad: int):
        """-> blocks (M+1, N, C): tokens then the segment embedding; cls (1, B, C)."""
        padding = layout.block_padding
        tokens = self.embed_tokens(layout.block_tokens.masked_fill(padding, pad))  # (N, M, C)
        sentence = self.embed_sentences(layout.block_sentence)[:, None]  # (N, 1, C)
        positions = self.embed_token_positions.weight[None, : tokens.size(1)]
        count = (~padding).sum(1, keepdim=True).clamp(min=1)
        segment_start = tokens.masked_fill(padding[..., None], 0).sum(1) / count  # mean of the segment's tokens
        position = layout.block_position
        if self.per_sentence_positions:
            position = position - layout.block_sentence * layout.segments_in_a[layout.block_example]
        segments = segment_start + self.embed_segment_positions(position)
        blocks = torch.cat([tokens + positions, segments[:, None]], dim=1) + sentence  # (N, M+1, C)
        cls = self.embed_tokens(src_tokens[:, :1]) + self.embed_sentences.weight[0]  # (B, 1, C), sentence A
        return self._finish(blocks).transpose(0, 1), self._finish(cls).transpose(0, 1)

    def _finish(self, x: Tensor) -> Tensor:
        return self.dropout_module(self.layernorm(x))


def check_lambert_supports(cfg: LayerConfig) -> None:
    """The norm-bench options LaMBERT's layers and stack do not implement, refused by name."""
    unsupported = {"--qk-norm": cfg.qk_norm, "--norm-type": cfg.norm_type != "layernorm",
                   "--normformer-layers": cfg.normformer_layers != "all", "--deepnorm": cfg.deepnorm_alpha is not None,
                   "--post-ln-layers": cfg.post_ln_layers is not None, "--ln-scaling": cfg.ln_scaling,
                   "--rezero": cfg.rezero, "--reordered-norm": cfg.reordered_norm}
    named = [flag for flag, asked in unsupported.items() if asked]
    if named:
        raise BadInput(f"lambert does not implement {', '.join(named)}")


class LambertSentenceEncoder(LayerStack, nn.Module):
    """Embeddings, L LambertLayers and (Pre-LN) a final norm, from the shared stack; returns RobertaEncoder's dict."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__()
        base = read_layer_config(args, "encoder", causal=False)
        check_lambert_supports(base)
        layer_cfg = LambertLayerConfig(**vars(base), max_segments=args.max_segments, segment_map=args.segment_map)
        self.start_stack(layer_cfg, LambertLayer, args.encoder_layers)
        self.pad, self.bos, self.sep = dictionary.pad(), dictionary.bos(), dictionary.eos()
        self.segment_length, self.max_segments = args.segment_length, args.max_segments
        self.embed_tokens = embed_tokens  # RobertaEncoder ties the LM head to it
        self.embeddings = LambertEmbeddings(args, embed_tokens, self.norm() if args.layernorm_embedding else nn.Identity())
        self.layers = nn.ModuleList(self.build_layer() for _ in range(args.encoder_layers))
        self.cls_layer = LambertLayer(layer_cfg) if args.cls_phase == "final" else None
        self.layer_norm = self.norm() if layer_cfg.normalize_before else nn.Identity()

    def forward(self, src_tokens, return_all_hiddens=False, token_embeddings=None, **unused):
        if return_all_hiddens or token_embeddings is not None:
            raise ValueError("lambert returns no inner states and takes no token_embeddings")
        layout = self.layout(src_tokens)
        blocks, cls = self.embeddings(src_tokens, layout, self.pad)
        masks = (layout.phase1_mask(), layout.phase2_mask())
        every_layer = self.cls_layer is None
        for layer in self.layers:
            blocks, new_cls = layer(blocks, cls if every_layer else None, layout, masks)
            cls = new_cls if every_layer else cls
        if not every_layer:
            cls = self.cls_layer.cls_phase(cls, blocks[-1], layout, masks[1])
        features = self.flat_features(self.layer_norm(blocks), self.layer_norm(cls), layout)
        return {"encoder_out": [features], "encoder_states": []}

    def layout(self, src_tokens: Tensor):
        if not src_tokens[:, 0].eq(self.bos).all():
            raise ValueError("lambert expects every input to start with [CLS] (<s>): pass --init-token 0")
        layout = segment_layout(src_tokens, self.pad, self.sep, self.segment_length)
        if layout.max_segments > self.max_segments:
            raise ValueError(
                f"a pair needs {layout.max_segments} segments of {self.segment_length} tokens, more than "
                f"--max-segments {self.max_segments}: keep A and B within "
                f"{max_pair_tokens(self.segment_length, self.max_segments)} tokens"
            )
        return layout

    @staticmethod
    def flat_features(blocks: Tensor, cls: Tensor, layout) -> Tensor:
        """(M+1, N, C) blocks and (1, B, C) [CLS] -> (T, B, C) in the input's layout; [SEP]/padding: 0."""
        bsz, seq_len, dim = layout.batch, layout.seq_len, cls.size(-1)
        rows = torch.cat([layout.token_rows, torch.arange(bsz, device=cls.device) * seq_len])
        token_features = blocks.flatten(0, 1).index_select(0, layout.token_slots * blocks.size(1) + layout.token_blocks)
        values = torch.cat([token_features, cls[0]])
        flat = values.new_zeros(bsz * seq_len, dim).index_copy(0, rows, values)
        return flat.view(bsz, seq_len, dim).transpose(0, 1)


class LambertEncoder(NormFormerBertEncoder):
    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = LambertSentenceEncoder(args, dictionary, embed_tokens)
        encoder.apply(init_bert_params)
        return encoder


@register_model("lambert")
class LambertModel(NormFormerBertModel):
    encoder_class = LambertEncoder

    @staticmethod
    def add_args(parser):
        NormFormerRobertaModel.add_args(parser)
        gen_parser_from_dataclass(parser, LambertOptions(), delete_default=True)

    @classmethod
    def build_model(cls, args, task):
        lambert_architecture(args)
        return super().build_model(args, task)


# ---------------------------------------------------------------------------------------------
# Presets: each fills only what the command line left unset. `lambert_base` is BERT-base-shaped and,
# as BERT, Post-LN with an embedding LayerNorm; `normformer_lambert_base` is Pre-LN with the three
# NormFormer operations (any switch of the operations table also works on its own).
# ---------------------------------------------------------------------------------------------
@register_model_architecture("lambert", "lambert")
def lambert_architecture(args):
    for option in fields(LambertOptions):
        if not option.name.startswith("_"):
            setattr(args, option.name, safe_getattr(args, option.name, option.default))
    pair_tokens = max_pair_tokens(args.segment_length, args.max_segments)
    args.max_positions = safe_getattr(args, "max_positions", pair_tokens + SPECIAL_TOKENS_PER_PAIR)
    postln_bert_base(args)  # 12 layers, 768, 12 heads, FFN 3072, GELU, Post-LN, embedding LN


@register_model_architecture("lambert", "lambert_base")
def lambert_base(args):
    lambert_architecture(args)


@register_model_architecture("lambert", "normformer_lambert_base")
def normformer_lambert_base(args):
    normformer_operations(args)
    preln_architecture(args)
    lambert_architecture(args)


@register_model_architecture("lambert", "lambert_tiny")
def lambert_tiny(args):
    """2 layers, 64 dim, 4 heads, FFN 256: for tests and smoke runs."""
    args.encoder_layers = safe_getattr(args, "encoder_layers", 2)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 256)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 4)
    lambert_architecture(args)

"""A fairseq-normformer model (normformer_lm, normformer_roberta, normformer_bert, normformer_transformer)
as the shipped HuggingFace modeling code (modeling_normformer.py, modeling_normformer_seq2seq.py): its
NormFormerConfig and its weights."""
import shutil
from pathlib import Path

from fairseq.modules import AdaptiveInput, LearnedPositionalEmbedding

from ..models.normformer_lm import NormFormerLanguageModel
from ..models.normformer_roberta import NormFormerRobertaModel
from ..models.normformer_transformer import NormFormerTransformerModel
from ..modules.operations import ENCODER_ATTENTION_OPERATIONS, OPERATIONS
from .configuration_normformer import NormFormerConfig
from .modeling_normformer import ACTIVATIONS, NormFormerForCausalLM, NormFormerForMaskedLM
from .modeling_normformer_seq2seq import NormFormerForSeq2SeqLM

HF_DIR = Path(__file__).resolve().parent
# the tokenizer saves its own
SHIPPED_FILES = ("configuration_normformer.py", "modeling_normformer.py", "modeling_normformer_seq2seq.py", "norm_kinds.py")
CONFIG_AUTO_MAP = {"AutoConfig": "configuration_normformer.NormFormerConfig", "AutoModel": "modeling_normformer.NormFormerModel"}
HEAD_AUTO_MAP = {
    NormFormerForCausalLM: {"AutoModelForCausalLM": "modeling_normformer.NormFormerForCausalLM"},
    NormFormerForMaskedLM: {"AutoModelForMaskedLM": "modeling_normformer.NormFormerForMaskedLM"},
    NormFormerForSeq2SeqLM: {"AutoModel": "modeling_normformer_seq2seq.NormFormerSeq2SeqModel",
                             "AutoModelForSeq2SeqLM": "modeling_normformer_seq2seq.NormFormerForSeq2SeqLM"},
}  # fmt: skip
# fairseq-only entries of a state dict: buffers, version counters, heads the export does not carry
NOT_EXPORTED = ("embed_positions._float_tensor", ".version", "encoder.pooler.", "encoder.nsp_head.", "encoder.sbo_head.",
                "classification_heads.")


def stack_of(model):
    """(the stacks of embeddings and layers: {fairseq state-dict prefix: (module, HF prefix)}, the HF class
    with its head)."""
    if isinstance(model, NormFormerLanguageModel):
        return {"decoder.": (model.decoder, "model.")}, NormFormerForCausalLM
    if isinstance(model, NormFormerRobertaModel):  # normformer_bert too
        return {"encoder.sentence_encoder.": (model.encoder.sentence_encoder, "model.")}, NormFormerForMaskedLM
    if isinstance(model, NormFormerTransformerModel):
        stacks = {"encoder.": (model.encoder, "model.encoder."), "decoder.": (model.decoder, "model.decoder.")}
        return stacks, NormFormerForSeq2SeqLM
    raise ValueError(
        f"cannot export {type(model).__name__}: the HuggingFace export covers normformer_lm, normformer_roberta, "
        "normformer_bert and normformer_transformer (normformer-convert-fairseq-lm converts fairseq's "
        "transformer_lm and transformer first)"
    )


def check_convertible(model) -> None:
    """Raise naming the flag of any setting the shipped modeling code does not implement."""
    stacks, _ = stack_of(model)
    problems = []
    for stack, _ in stacks.values():
        if isinstance(stack.embed_tokens, AdaptiveInput):
            problems.append("--adaptive-input")
        if getattr(stack, "adaptive_softmax", None) is not None:
            problems.append("--adaptive-softmax-cutoff")
        if getattr(stack, "project_in_dim", None) is not None or getattr(stack, "project_out_dim", None) is not None:
            problems.append("--decoder-input-dim/--decoder-output-dim different from --decoder-embed-dim")
        if str(stack.layer_cfg.activation_fn) not in ACTIVATIONS:
            problems.append(f"--activation-fn {stack.layer_cfg.activation_fn}")
    if problems:
        raise ValueError(f"the HuggingFace export does not implement: {', '.join(dict.fromkeys(problems))}")


def stack_settings(stack, dictionary) -> dict:
    """What an encoder-decoder's encoder and decoder may differ in (configuration_normformer.ENCODER_SETTINGS)."""
    cfg, positions = stack.layer_cfg, stack.embed_positions
    if positions is None:
        position_type, max_positions = "none", stack.max_positions()
    elif isinstance(positions, LearnedPositionalEmbedding):
        position_type, max_positions = "learned", positions.weight.size(0) - dictionary.pad() - 1
    else:
        position_type, max_positions = "sinusoidal", stack.max_positions()
    return dict(
        vocab_size=len(dictionary),
        num_hidden_layers=len(stack.layers),
        num_attention_heads=cfg.attention_heads,
        intermediate_size=cfg.ffn_embed_dim,
        position_embedding_type=position_type,
        max_position_embeddings=max_positions,
        final_layer_norm=stack.layer_norm is not None,
        normformer_layers=cfg.normformer_layer_indices(len(stack.layers)),
        deepnorm_alpha=cfg.deepnorm_alpha,
        post_ln_layers=cfg.post_ln_layer_indices(len(stack.layers)),
    )


def layer_settings(stack) -> dict:
    """What both sides share: sizes, Pre-/Post-LN, the operations, embedding scale and LayerNorm."""
    cfg = stack.layer_cfg
    return dict(
        hidden_size=cfg.embed_dim,
        hidden_act=str(cfg.activation_fn),
        normalize_before=cfg.normalize_before,
        head_scale_position=str(cfg.head_scale_position),
        embed_scale=float(stack.embed_scale),
        layernorm_embedding=stack.layernorm_embedding is not None,
        norm_type=cfg.norm_type,
        ffn_norm_type=cfg.ffn_norm_kind,
        ln_scaling=cfg.ln_scaling,
        rezero=cfg.rezero,
        reordered_norm=cfg.reordered_norm,
        **{op.field: getattr(cfg, op.field) for op in OPERATIONS},
    )


def normformer_config(model, dictionary) -> NormFormerConfig:
    """A causal LM's or an encoder's config; ``dictionary`` is the model's (the task's source dictionary)."""
    stacks, head_class = stack_of(model)
    (stack, _), = stacks.values()
    causal = head_class is NormFormerForCausalLM
    output = model.decoder.output_projection.weight if causal else model.encoder.lm_head.weight
    return NormFormerConfig(
        causal=causal,
        type_vocab_size=stack.embed_segments.num_embeddings if hasattr(stack, "embed_segments") else 0,
        pad_token_id=dictionary.pad(),
        bos_token_id=dictionary.eos() if causal else dictionary.bos(),  # an LM's text starts after </s>
        eos_token_id=dictionary.eos(),
        tie_word_embeddings=output is stack.embed_tokens.weight,
        auto_map={**CONFIG_AUTO_MAP, **HEAD_AUTO_MAP[head_class]},
        **layer_settings(stack),
        **stack_settings(stack, dictionary),
    )


def seq2seq_config(model, src_dict, tgt_dict) -> NormFormerConfig:
    """normformer_transformer's config: the decoder's settings, the encoder's as encoder_<name>."""
    if src_dict.pad() != tgt_dict.pad():
        raise ValueError(f"the source and target dictionaries pad with different ids ({src_dict.pad()}, {tgt_dict.pad()})")
    encoder, decoder = model.encoder, model.decoder
    return NormFormerConfig(
        is_encoder_decoder=True,
        causal=True,
        pad_token_id=tgt_dict.pad(),
        bos_token_id=tgt_dict.eos(),  # fairseq's translation decoder starts with </s>
        eos_token_id=tgt_dict.eos(),
        tie_word_embeddings=decoder.output_projection.weight is decoder.embed_tokens.weight,
        share_encoder_decoder_embeddings=encoder.embed_tokens is decoder.embed_tokens,
        auto_map={**CONFIG_AUTO_MAP, **HEAD_AUTO_MAP[NormFormerForSeq2SeqLM]},
        **layer_settings(decoder),
        **stack_settings(decoder, tgt_dict),
        **{f"encoder_{name}": value for name, value in stack_settings(encoder, src_dict).items()},
        **{op.field: getattr(decoder.layer_cfg, op.field) for op in ENCODER_ATTENTION_OPERATIONS},
    )


def hf_name(name: str, stacks: dict) -> str:
    """fairseq's parameter name -> the shipped model's (the layers keep fairseq's names)."""
    if name == "decoder.output_projection.weight":
        return "lm_head.weight"
    for prefix, (_, hf_prefix) in stacks.items():
        if name.startswith(prefix):
            return hf_prefix + name[len(prefix) :]
    if name in ("encoder.lm_head.weight", "encoder.lm_head.bias"):
        return "lm_head.decoder." + name.rsplit(".", 1)[1]
    return name.replace("encoder.lm_head.", "lm_head.", 1)


def to_normformer_hf_model(model, dictionary, target_dictionary=None):
    """The shipped HuggingFace model (NormFormerForCausalLM, NormFormerForMaskedLM or NormFormerForSeq2SeqLM)
    equal to ``model``; ``dictionary`` is the task's source dictionary, ``target_dictionary`` an
    encoder-decoder's target one."""
    check_convertible(model)
    stacks, head_class = stack_of(model)
    if head_class is NormFormerForSeq2SeqLM:
        hf_model = head_class(seq2seq_config(model, dictionary, target_dictionary))
    else:
        hf_model = head_class(normformer_config(model, dictionary))
    state = {
        hf_name(name, stacks): tensor
        for name, tensor in model.state_dict().items()
        if not any(part in name for part in NOT_EXPORTED)
    }
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"parameter mapping incomplete: missing {missing}, unexpected {unexpected}")
    if head_class is not NormFormerForMaskedLM:
        generation = hf_model.generation_config
        generation.suppress_tokens = [dictionary.pad()]  # as fairseq's SequenceGenerator
        if head_class is NormFormerForSeq2SeqLM:  # as fairseq-generate: start from </s>, --min-len 1
            generation.decoder_start_token_id = target_dictionary.eos()
            generation.min_new_tokens = 1
    return hf_model.eval()


def copy_modeling_code(out_dir: Path) -> None:
    """Ship the standalone modeling and configuration code that ``auto_map`` names."""
    for name in SHIPPED_FILES:
        shutil.copyfile(HF_DIR / name, Path(out_dir) / name)

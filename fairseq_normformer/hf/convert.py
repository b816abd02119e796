"""A fairseq-normformer model (normformer_lm, normformer_roberta, normformer_bert) as the shipped
HuggingFace modeling code (modeling_normformer.py): its NormFormerConfig and its weights."""
import shutil
from pathlib import Path

from fairseq.modules import AdaptiveInput, LearnedPositionalEmbedding

from ..models.normformer_bert import NormFormerBertModel
from ..models.normformer_lm import NormFormerLanguageModel
from ..models.normformer_roberta import NormFormerRobertaModel
from ..modules.operations import OPERATIONS
from .configuration_normformer import NormFormerConfig
from .modeling_normformer import ACTIVATIONS, NormFormerForCausalLM, NormFormerForMaskedLM

HF_DIR = Path(__file__).resolve().parent
SHIPPED_FILES = ("configuration_normformer.py", "modeling_normformer.py")  # the tokenizer saves its own
CONFIG_AUTO_MAP = {"AutoConfig": "configuration_normformer.NormFormerConfig", "AutoModel": "modeling_normformer.NormFormerModel"}
HEAD_AUTO_MAP = {
    NormFormerForCausalLM: {"AutoModelForCausalLM": "modeling_normformer.NormFormerForCausalLM"},
    NormFormerForMaskedLM: {"AutoModelForMaskedLM": "modeling_normformer.NormFormerForMaskedLM"},
}
# fairseq-only entries of a state dict: buffers, version counters, heads the export does not carry
NOT_EXPORTED = ("embed_positions._float_tensor", ".version", "encoder.pooler.", "encoder.nsp_head.", "encoder.sbo_head.",
                "classification_heads.")


def stack_of(model):
    """(the embeddings-and-layers module, its state-dict prefix, the HF class with its LM head)."""
    if isinstance(model, NormFormerLanguageModel):
        return model.decoder, "decoder.", NormFormerForCausalLM
    if isinstance(model, NormFormerRobertaModel):  # normformer_bert too
        return model.encoder.sentence_encoder, "encoder.sentence_encoder.", NormFormerForMaskedLM
    raise ValueError(
        f"cannot export {type(model).__name__}: only normformer_lm, normformer_roberta and normformer_bert "
        "(normformer-convert-fairseq-lm converts fairseq's transformer_lm; translation models are not exported yet)"
    )


def check_convertible(model) -> None:
    """Raise naming the flag of any setting the shipped modeling code does not implement."""
    stack, _, _ = stack_of(model)
    problems = []
    if isinstance(stack.embed_tokens, AdaptiveInput):
        problems.append("--adaptive-input")
    if getattr(stack, "adaptive_softmax", None) is not None:
        problems.append("--adaptive-softmax-cutoff")
    if getattr(stack, "project_in_dim", None) is not None or getattr(stack, "project_out_dim", None) is not None:
        problems.append("--decoder-input-dim/--decoder-output-dim different from --decoder-embed-dim")
    if str(stack.layer_cfg.activation_fn) not in ACTIVATIONS:
        problems.append(f"--activation-fn {stack.layer_cfg.activation_fn}")
    if problems:
        raise ValueError(f"the HuggingFace export does not implement: {', '.join(problems)}")


def normformer_config(model, dictionary) -> NormFormerConfig:
    stack, _, head_class = stack_of(model)
    cfg, pad = stack.layer_cfg, dictionary.pad()
    positions = stack.embed_positions
    if positions is None:
        position_type, max_positions = "none", stack.max_positions()
    elif isinstance(positions, LearnedPositionalEmbedding):
        position_type, max_positions = "learned", positions.weight.size(0) - pad - 1
    else:
        position_type, max_positions = "sinusoidal", stack.max_positions()
    causal = head_class is NormFormerForCausalLM
    output = model.decoder.output_projection.weight if causal else model.encoder.lm_head.weight
    return NormFormerConfig(
        vocab_size=len(dictionary),
        hidden_size=cfg.embed_dim,
        num_hidden_layers=len(stack.layers),
        num_attention_heads=cfg.attention_heads,
        intermediate_size=cfg.ffn_embed_dim,
        hidden_act=str(cfg.activation_fn),
        causal=causal,
        normalize_before=cfg.normalize_before,
        head_scale_position=str(cfg.head_scale_position),
        position_embedding_type=position_type,
        max_position_embeddings=max_positions,
        embed_scale=float(stack.embed_scale),
        layernorm_embedding=stack.layernorm_embedding is not None,
        final_layer_norm=stack.layer_norm is not None,
        type_vocab_size=stack.embed_segments.num_embeddings if hasattr(stack, "embed_segments") else 0,
        pad_token_id=pad,
        bos_token_id=dictionary.eos() if causal else dictionary.bos(),  # an LM's text starts after </s>
        eos_token_id=dictionary.eos(),
        tie_word_embeddings=output is stack.embed_tokens.weight,
        auto_map={**CONFIG_AUTO_MAP, **HEAD_AUTO_MAP[head_class]},
        **{op.field: getattr(cfg, op.field) for op in OPERATIONS},
    )


def hf_name(name: str, stack_prefix: str) -> str:
    """fairseq's parameter name -> the shipped model's (the layers keep fairseq's names)."""
    if name == "decoder.output_projection.weight":
        return "lm_head.weight"
    if name.startswith(stack_prefix):
        return "model." + name[len(stack_prefix) :]
    if name in ("encoder.lm_head.weight", "encoder.lm_head.bias"):
        return "lm_head.decoder." + name.rsplit(".", 1)[1]
    return name.replace("encoder.lm_head.", "lm_head.", 1)


def to_normformer_hf_model(model, dictionary):
    """The shipped HuggingFace model (NormFormerForCausalLM or NormFormerForMaskedLM) equal to ``model``."""
    check_convertible(model)
    _, prefix, head_class = stack_of(model)
    hf_model = head_class(normformer_config(model, dictionary))
    state = {
        hf_name(name, prefix): tensor
        for name, tensor in model.state_dict().items()
        if not any(part in name for part in NOT_EXPORTED)
    }
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"parameter mapping incomplete: missing {missing}, unexpected {unexpected}")
    if head_class is NormFormerForCausalLM:
        hf_model.generation_config.suppress_tokens = [dictionary.pad()]  # as fairseq's SequenceGenerator
    return hf_model.eval()


def copy_modeling_code(out_dir: Path) -> None:
    """Ship the standalone modeling and configuration code that ``auto_map`` names."""
    for name in SHIPPED_FILES:
        shutil.copyfile(HF_DIR / name, Path(out_dir) / name)

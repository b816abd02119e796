"""Load fairseq's own ``transformer_lm`` checkpoints (with or without ``--scale-*``) as ``normformer_lm``,
and its ``transformer`` (translation) checkpoints as ``normformer_transformer``.

fairseq's built-in NormFormer flags only take effect when the model is built from an argparse
Namespace, so a checkpoint's config may claim operations its weights do not have (or the other way
round). The weights are the truth: the operations are detected from the state dict. fairseq's
``transformer`` has no NormFormer operations and the same parameter names as ours with every switch off.
"""
import argparse
import logging
import os
import re

from fairseq import checkpoint_utils
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer_lm import TransformerLanguageModel
from omegaconf import OmegaConf

from ..modules.layer_config import LAYER_SWITCHES
from ..modules.operations import OPERATIONS, fairseq_renames, operations_in

logger = logging.getLogger(__name__)

# fairseq keeps HeadScale's γ (c_attn) at layer level; here it lives in the attention module.
_RENAMES = [
    (re.compile(rf"^(decoder\.layers\.\d+\.){re.escape(theirs)}$"), rf"\g<1>{ours}")
    for theirs, ours in fairseq_renames().items()
]


def detect_operations(state_dict) -> dict:
    """The NormFormer switches a fairseq transformer_lm state dict really has."""
    first_layer = {k[len("decoder.layers.0.") :] for k in state_dict if k.startswith("decoder.layers.0.")}
    if not first_layer:
        raise ValueError("not a fairseq transformer_lm state dict: no 'decoder.layers.0.*' parameters")
    return operations_in(first_layer, fairseq=True)


def convert_state_dict(state_dict) -> dict:
    converted = {}
    for key, value in state_dict.items():
        for pattern, replacement in _RENAMES:
            key = pattern.sub(replacement, key)
        converted[key] = value
    return converted


def convert_model_cfg(model_cfg: dict, state_dict) -> dict:
    """A ``normformer_lm`` model config equivalent to a fairseq ``transformer_lm`` one."""
    cfg = dict(model_cfg)
    operations = detect_operations(state_dict)
    for flag, present in operations.items():
        if bool(cfg.get(flag)) != present:
            logger.warning(f"checkpoint config says {flag}={cfg.get(flag)} but its weights say {present}; using the weights")
    cfg.update(operations)
    cfg.update(
        _name="normformer_lm",
        arch="normformer_lm",
        head_scale_position="after_wo",  # fairseq's HeadScale acts after W^O
        post_ln=not cfg.get("decoder_normalize_before", True),
        deepnorm=False,
        layernorm_impl="auto",
    )
    cfg.update({op.field: False for op in OPERATIONS if op.fairseq_params is None})  # fairseq lacks them
    return cfg


def convert_translation_cfg(model_cfg: dict, state_dict) -> dict:
    """A ``normformer_transformer`` model config equivalent to a fairseq ``transformer`` one."""
    cfg = dict(model_cfg)
    encoder_pre_ln = bool(cfg.get("encoder_normalize_before", False))  # fairseq's transformer: Post-LN
    if bool(cfg.get("decoder_normalize_before", False)) != encoder_pre_ln:
        raise ValueError(
            f"the checkpoint has --encoder-normalize-before={encoder_pre_ln} but --decoder-normalize-before="
            f"{not encoder_pre_ln}: normformer_transformer's layers are all Pre-LN or all Post-LN (--post-ln)"
        )
    cfg.update(_name="normformer_transformer", arch="normformer_transformer", post_ln=not encoder_pre_ln,
               deepnorm=False, head_scale_position="paper", layernorm_impl="auto")  # fmt: skip
    cfg.update({op.field: False for op in LAYER_SWITCHES})
    return cfg


# fairseq's model class -> how its config becomes ours (the state dict's renames are the same for both).
CONVERTERS = {TransformerLanguageModel: convert_model_cfg, TransformerModel: convert_translation_cfg}


def fairseq_model_class(model_cfg: dict):
    """The registered class of a checkpoint's model (argparse-era checkpoints name their --arch)."""
    name = model_cfg.get("_name") or model_cfg.get("arch")
    return ARCH_MODEL_REGISTRY.get(name) or MODEL_REGISTRY.get(name)


def convert_checkpoint(src: str, dst: str) -> dict:
    """Write ``dst``, a normformer_lm (normformer_transformer) checkpoint with the same logits as fairseq
    ``transformer_lm`` (``transformer``) checkpoint ``src``."""
    if os.path.exists(dst):
        raise FileExistsError(f"{dst} already exists; refusing to overwrite it")
    state = checkpoint_utils.load_checkpoint_to_cpu(src)  # (argparse.Namespace is allow-listed: fixes/)
    cfg = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
    if isinstance(cfg["model"], argparse.Namespace):  # an argparse model's (fairseq's transformer)
        cfg["model"] = vars(cfg["model"])
    convert_cfg = CONVERTERS.get(fairseq_model_class(cfg["model"]))
    if convert_cfg is None:
        model_name = cfg["model"].get("_name")
        raise ValueError(f"{src} holds a '{model_name}' model, not fairseq's transformer_lm or transformer")
    cfg["model"] = convert_cfg(cfg["model"], state["model"])
    state["cfg"], state["args"] = cfg, None
    state["model"] = convert_state_dict(state["model"])
    checkpoint_utils.torch_persistent_save(state, dst)
    return cfg["model"]

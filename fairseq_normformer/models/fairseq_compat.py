"""Load fairseq's own ``transformer_lm`` checkpoints (with or without ``--scale-*``) as ``normformer_lm``.

fairseq's built-in NormFormer flags only take effect when the model is built from an argparse
Namespace, so a checkpoint's config may claim operations its weights do not have (or the other way
round). The weights are the truth: the operations are detected from the state dict.
"""
import logging
import os
import re

from fairseq import checkpoint_utils
from omegaconf import OmegaConf

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
        layernorm_impl="auto",
    )
    cfg.update({op.field: False for op in OPERATIONS if op.fairseq_params is None})  # fairseq lacks them
    return cfg


def convert_checkpoint(src: str, dst: str) -> dict:
    """Write ``dst``, a normformer_lm checkpoint with the same logits as fairseq checkpoint ``src``."""
    if os.path.exists(dst):
        raise FileExistsError(f"{dst} already exists; refusing to overwrite it")
    state = checkpoint_utils.load_checkpoint_to_cpu(src)  # (argparse.Namespace is allow-listed: fixes/)
    model_name = state["cfg"]["model"].get("_name")
    if model_name != "transformer_lm":
        raise ValueError(f"{src} holds a '{model_name}' model, not fairseq's transformer_lm")
    cfg = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
    cfg["model"] = convert_model_cfg(cfg["model"], state["model"])
    state["cfg"], state["args"] = cfg, None
    state["model"] = convert_state_dict(state["model"])
    checkpoint_utils.torch_persistent_save(state, dst)
    return cfg["model"]

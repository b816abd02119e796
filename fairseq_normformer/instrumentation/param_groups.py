"""Parameter groups by name: which layer and which operation a parameter belongs to.

Names follow fairseq's transformer layers (and ours, ``modules/normformer_layer.py``):
``decoder.layers.3.fc2.weight`` is FC2's weight in layer 3; wrappers that fairseq adds
(DDP's ``module.``, FSDP's ``_fsdp_wrapped_module.``/``_fpw_module.``, activation checkpointing's
``_checkpoint_wrapped_module.``) are dropped.
"""
import re
from dataclasses import dataclass
from typing import Optional

from ..modules.operations import added_gammas, fairseq_renames, layer_modules

# Operations of one layer in data-flow order (Fig. 5): the baseline's modules and the table's.
OPERATIONS = layer_modules()
# The learned scales of the paper's added operations (Fig. 4): parameter name -> label.
ADDED_GAMMAS = added_gammas()
# fairseq's built-in NormFormer layer calls HeadScale's γ ``c_attn``.
ALIASES = fairseq_renames()

_WRAPPERS = re.compile(r"(^|\.)(module|_fsdp_wrapped_module|_fpw_module|_checkpoint_wrapped_module)\.")
_IN_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class ParamGroup:
    key: str  # e.g. "layers.3.fc2.weight", or the whole name outside the layers ("decoder.embed_tokens.weight")
    layer: Optional[int]  # None outside the transformer layers
    local: str  # the name inside its layer, e.g. "fc2.weight" (the whole name outside the layers)
    operation: Optional[str]  # one of OPERATIONS, or None when not recognised
    tensor: str  # "weight", "bias", or the parameter's own name (head_scale, w_resid)


def strip_wrappers(name: str) -> str:
    previous = None
    while previous != name:
        previous, name = name, _WRAPPERS.sub(r"\1", name)
    return name


def param_group(name: str) -> ParamGroup:
    """The layer and operation of parameter ``name`` (as model.named_parameters() gives it)."""
    name = strip_wrappers(name)
    match = _IN_LAYER.search(name)
    if match is None:
        return ParamGroup(name, None, name, None, name.rsplit(".", 1)[-1])
    layer, rest = int(match.group(1)), ALIASES.get(match.group(2), match.group(2))
    operation, _, tensor = rest.rpartition(".")
    if rest in OPERATIONS:  # a bare parameter: head_scale, w_resid
        operation, tensor = rest, rest.rsplit(".", 1)[-1]
    return ParamGroup(f"layers.{layer}.{rest}", layer, rest, operation if operation in OPERATIONS else None, tensor)

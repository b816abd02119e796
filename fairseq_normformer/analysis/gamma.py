"""The learned scales of the paper's added operations, per layer, from a checkpoint (Fig. 4):
Post-Attn LN γ, FFN LN γ, HeadScale γ (and ResScale λ_resid when present)."""
from typing import Dict

import numpy as np
import torch
from fairseq import checkpoint_utils

from ..instrumentation.param_groups import ADDED_GAMMAS, param_group

Gammas = Dict[str, Dict[int, np.ndarray]]  # operation label -> layer -> values


def load_model_state(path) -> Dict[str, torch.Tensor]:
    """The model's state dict of a fairseq checkpoint (``checkpoint_*.pt``)."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    if "model" not in state:
        raise ValueError(f"{path} is not a fairseq checkpoint (it has no 'model' entry)")
    return state["model"]


def added_gammas(model_state: Dict[str, torch.Tensor]) -> Gammas:
    """{label: {layer: γ values}} for each added operation the model has, layers in order."""
    gammas: Gammas = {}
    for name, tensor in model_state.items():
        group = param_group(name)
        if group.layer is not None and group.local in ADDED_GAMMAS:
            label = ADDED_GAMMAS[group.local]
            gammas.setdefault(label, {})[group.layer] = tensor.detach().float().flatten().numpy()
    if not gammas:
        raise ValueError(
            "the checkpoint has none of the added operations' scales (" + ", ".join(ADDED_GAMMAS)
            + "): it is a baseline model, or not a NormFormer transformer"
        )  # fmt: skip
    return {label: dict(sorted(by_layer.items())) for label, by_layer in gammas.items()}


def summary_rows(gammas: Gammas) -> list:
    """[operation, layer, n, mean, std, min, max] rows for a markdown table."""
    rows = []
    for label, by_layer in gammas.items():
        for layer, values in by_layer.items():
            stats = [float(f(values)) for f in (np.mean, np.std, np.min, np.max)]
            rows.append([label, layer, int(values.size)] + stats)
    return rows

"""DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers"), on Post-LN layers.

Every sublayer computes x_{l+1} = LN(α x_l + G_l(x_l)) (``NormFormerLayer._sublayer``), and the initial
weights of the value and output projections and of both FFN layers are multiplied by β (the model's own
initialisation times β, as the authors' torchscale code divides it by 1/β). α and β from the depth, DeepNet
Table 1 (N encoder layers, M decoder layers):

    decoder-only                 α = (2M)^(1/4)              β = (8M)^(-1/4)
    encoder-only                 α = (2N)^(1/4)              β = (8N)^(-1/4)
    encoder-decoder, encoder     α = 0.81 (N^4 M)^(1/16)     β = 0.87 (N^4 M)^(-1/16)
    encoder-decoder, decoder     α = (3M)^(1/4)              β = (12M)^(-1/4)
"""
from typing import Tuple

import torch
from torch import nn

from ..checks import BadInput

SCALED_BY_BETA = ("v_proj", "out_proj", "fc1", "fc2")  # W^V, W^O (self- and encoder attention), FC1, FC2


def deepnorm_constants(stack: str, encoder_layers: int, decoder_layers: int) -> Tuple[float, float]:
    """(α, β) of a ``stack``: "decoder-only", "encoder-only", or an encoder-decoder's "encoder" or "decoder"."""
    n, m = encoder_layers, decoder_layers
    if stack == "decoder-only":
        return (2 * m) ** 0.25, (8 * m) ** -0.25
    if stack == "encoder-only":
        return (2 * n) ** 0.25, (8 * n) ** -0.25
    if stack == "encoder":
        return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)
    if stack == "decoder":
        return (3 * m) ** 0.25, (12 * m) ** -0.25
    raise ValueError(f"unknown stack {stack!r}")


def check_deepnorm(normalize_before: bool) -> None:
    if normalize_before:
        raise BadInput("--deepnorm is a Post-LN scheme (LN(α·x + f(x))): pass --post-ln with it")


def deepnorm_init_(layers: nn.Module, beta: float) -> None:
    """Multiply the initial weights of W^V, W^O, FC1 and FC2 of every layer in ``layers`` by β."""
    with torch.no_grad():
        for name, module in layers.named_modules():
            if name.rsplit(".", 1)[-1] in SCALED_BY_BETA:
                module.weight.mul_(beta)

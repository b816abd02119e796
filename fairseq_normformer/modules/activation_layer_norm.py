"""NormFormer's FFN LN fused with the FFN activation on the torch path: y = LN(act(x)) (Fig. 1, "FFN LN").

Run as two ops, the pair keeps three (T, B, F) tensors for backward: FC1's output (the activation's
input), the activation (the LayerNorm's input) and the LayerNorm's output (FC2's input). This function
keeps only FC1's output, the LayerNorm's mean and 1/std per row (fp32) and its weight and bias, and
recomputes the activation and its derivative in backward, so with FC2 keeping the output the FFN LN adds
no activation-sized tensor over a Pre-LN FFN. The Triton kernel (kernels/triton_layer_norm.py) does the
same on the GPU in one pass; this is the same saving for one more pass over FC1's output in backward.
"""
from typing import Callable

import torch
from fairseq import utils
from torch import nn


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


class TorchActivationLayerNormFunction(torch.autograd.Function):
    """LN(act(x)) over the last dimension; the activation and the statistics in fp32 (fp64 for fp64 inputs),
    the output in x's dtype."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, activation: Callable):
        f32 = _compute_dtype(x)
        y, mean, rstd = torch.native_layer_norm(activation(x.to(f32)), (x.size(-1),), weight.to(f32), bias.to(f32), eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.activation = activation
        return y.to(x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        with torch.enable_grad():  # recompute act(x) to get both a = act(x) and d act / dx
            f32 = _compute_dtype(x)
            x32 = x.detach().to(f32).requires_grad_()
            a = ctx.activation(x32)
        da, dw, db = torch.ops.aten.native_layer_norm_backward(
            dy.to(f32), a.detach(), (x.size(-1),), mean, rstd, weight.to(f32), bias.to(f32), [True, True, True]
        )
        (dx,) = torch.autograd.grad(a, x32, da)
        return dx.to(x.dtype), dw.to(weight.dtype), db.to(bias.dtype), None, None


class TorchActivationLayerNorm(nn.Module):
    """norm(act(x)) with the parameters of the LayerNorm ``norm`` passed at call time, as the Triton
    ActivationLayerNorm (so a layer keeps its ``ffn_layernorm.weight/bias`` names). Any fairseq activation."""

    def __init__(self, activation: str):
        super().__init__()
        self.activation = activation
        self.activation_fn = utils.get_activation_fn(activation)

    def forward(self, x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return TorchActivationLayerNormFunction.apply(x, norm.weight, norm.bias, norm.eps, self.activation_fn)

    def extra_repr(self) -> str:
        return f"activation={self.activation}"

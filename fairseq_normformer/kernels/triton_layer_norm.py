"""Triton kernels: LayerNorm, and an activation fused into the LayerNorm after it.

    y = LN(act(x)) = (a - mean(a)) / sqrt(var(a) + eps) * w + b,   a = act(x)

``act`` is the identity (plain LayerNorm) or one of fairseq's FFN activations, so NormFormer's FFN LN
(Fig. 1, "FFN LN": LayerNorm after the FFN activation) reads the FC1 output once and writes the FC2 input
once, instead of writing and re-reading the activation. The backward recomputes ``act(x)`` from the
saved pre-activation instead of storing it. Inputs may be fp32, fp16 or bf16; statistics and arithmetic
are fp32; outputs have the input's dtype.

The kernels run on CUDA tensors, or on CPU tensors through Triton's interpreter when TRITON_INTERPRET=1
is set before this module is imported (that is how the tests run them without a GPU).
"""
import torch
import triton
import triton.language as tl
from torch import nn

# The activation applied before the LayerNorm, by fairseq's --activation-fn name (constexpr codes).
ACTIVATIONS = {"linear": 0, "relu": 1, "gelu": 2, "gelu_accurate": 3, "gelu_fast": 3, "relu_squared": 4}
MAX_WIDTH = 16384  # one row lives in registers: 16K fp32 values per program
INTERPRETED = triton.knobs.runtime.interpret  # decided when the kernels below are decorated


@triton.jit
def _tanh(u):
    return 2.0 * tl.sigmoid(2.0 * u) - 1.0


@triton.jit
def _normal_cdf(x):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2."""
    return 0.5 * (1.0 + tl.math.erf(x * 0.7071067811865476))


@triton.jit
def _gelu_tanh_arg(x):
    """u(x) = sqrt(2 / pi) (x + 0.044715 x^3), GELU's tanh approximation is x (1 + tanh u) / 2."""
    return 0.7978845608028654 * (x + 0.044715 * x * x * x)


@triton.jit
def _gelu_tanh_arg_grad(x):
    return 0.7978845608028654 * (1.0 + 0.134145 * x * x)


@triton.jit
def _activation(x, ACTIVATION: tl.constexpr):
    """act(x) in fp32: identity, ReLU, GELU (erf), GELU (tanh approximation, fairseq's gelu_accurate),
    squared ReLU (the authors' 2.7B NormFormer)."""
    if ACTIVATION == 1:
        a = tl.maximum(x, 0.0)
    elif ACTIVATION == 2:
        a = x * _normal_cdf(x)
    elif ACTIVATION == 3:
        a = 0.5 * x * (1.0 + _tanh(_gelu_tanh_arg(x)))
    elif ACTIVATION == 4:
        r = tl.maximum(x, 0.0)
        a = r * r
    else:
        a = x
    return a


@triton.jit
def _activation_grad(x, ACTIVATION: tl.constexpr):
    """d act(x) / dx in fp32."""
    if ACTIVATION == 1:
        g = tl.where(x > 0.0, 1.0, 0.0)
    elif ACTIVATION == 2:  # Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
        g = _normal_cdf(x) + x * 0.3989422804014327 * tl.exp(-0.5 * x * x)
    elif ACTIVATION == 3:
        t = _tanh(_gelu_tanh_arg(x))
        g = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _gelu_tanh_arg_grad(x)
    elif ACTIVATION == 4:
        g = 2.0 * tl.maximum(x, 0.0)
    else:
        g = tl.full(x.shape, 1.0, tl.float32)
    return g


@triton.jit
def _layer_norm_fwd_kernel(
    X, Y, W, B, Mean, Rstd, N, eps, ACTIVATION: tl.constexpr, BLOCK_N: tl.constexpr
):
    """One program per row of X (M, N): Y = LN(act(X)); saves the row's mean and 1/std."""
    row = tl.program_id(0).to(tl.int64)  # row * N may pass 2^31
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    a = tl.where(mask, _activation(x, ACTIVATION), 0.0)
    mean = tl.sum(a, axis=0) / N
    centered = tl.where(mask, a - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (centered * rstd * w + b).to(Y.dtype.element_ty), mask=mask)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


@triton.jit
def _layer_norm_bwd_kernel(
    X, DY, DX, W, Mean, Rstd, DW_partial, DB_partial, M, N, ROWS_PER_PROGRAM,
    ACTIVATION: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Each program takes ROWS_PER_PROGRAM consecutive rows: writes their dX and one partial sum of
    dW and dB (summed over programs afterwards, so the result does not depend on scheduling).

    With x̂ = (a - mean) * rstd and g = w * dy:  da = rstd * (g - mean(g) - x̂ * mean(g * x̂)),
    dx = da * act'(x),  dw = Σ_rows dy * x̂,  db = Σ_rows dy.
    """
    pid = tl.program_id(0).to(tl.int64)  # row * N may pass 2^31
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_N,), dtype=tl.float32)
    db = tl.zeros((BLOCK_N,), dtype=tl.float32)
    first = pid * ROWS_PER_PROGRAM
    for row in range(first, tl.minimum(first + ROWS_PER_PROGRAM, M)):
        x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + row)
        x_hat = tl.where(mask, (_activation(x, ACTIVATION) - tl.load(Mean + row)) * rstd, 0.0)
        g = w * dy
        da = rstd * (g - tl.sum(g, axis=0) / N - x_hat * (tl.sum(g * x_hat, axis=0) / N))
        dx = da * _activation_grad(x, ACTIVATION)
        tl.store(DX + row * N + cols, dx.to(DX.dtype.element_ty), mask=mask)
        dw += dy * x_hat
        db += dy
    tl.store(DW_partial + pid * N + cols, dw, mask=mask)
    tl.store(DB_partial + pid * N + cols, db, mask=mask)


def _launch_config(width: int):
    block = triton.next_power_of_2(width)
    return block, min(max(block // 256, 1), 16)  # BLOCK_N, num_warps


def _num_bwd_programs(rows: int, device: torch.device) -> int:
    if device.type != "cuda":  # the interpreter runs programs one after another
        return min(rows, 8)
    return min(rows, 4 * torch.cuda.get_device_properties(device).multi_processor_count)


def layer_norm_fwd(x: torch.Tensor, weight, bias, eps: float, activation: int):
    """x: (M, N) contiguous -> y (M, N) in x's dtype, mean and rstd (M,) in fp32."""
    rows, width = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    block, num_warps = _launch_config(width)
    _layer_norm_fwd_kernel[(rows,)](
        x, y, weight, bias, mean, rstd, width, eps, ACTIVATION=activation, BLOCK_N=block, num_warps=num_warps
    )
    return y, mean, rstd


def layer_norm_bwd(dy: torch.Tensor, x: torch.Tensor, weight, mean, rstd, activation: int):
    """dy, x: (M, N) contiguous -> dx (M, N), dweight and dbias (N,) in the weight's dtype."""
    rows, width = x.shape
    programs = _num_bwd_programs(rows, x.device)
    rows_per_program = triton.cdiv(rows, programs)
    programs = triton.cdiv(rows, rows_per_program)
    dx = torch.empty_like(x)
    dw_partial = torch.empty(programs, width, dtype=torch.float32, device=x.device)
    db_partial = torch.empty_like(dw_partial)
    block, num_warps = _launch_config(width)
    _layer_norm_bwd_kernel[(programs,)](
        x, dy, dx, weight, mean, rstd, dw_partial, db_partial, rows, width, rows_per_program,
        ACTIVATION=activation, BLOCK_N=block, num_warps=num_warps,
    )  # fmt: skip
    return dx, dw_partial.sum(0).to(weight.dtype), db_partial.sum(0).to(weight.dtype)


class ActivationLayerNormFunction(torch.autograd.Function):
    """LN(act(x)) over the last dimension; saves x (not act(x)), the mean and 1/std."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, activation: int):
        rows = x.contiguous().view(-1, x.size(-1))  # (M, N)
        y, mean, rstd = layer_norm_fwd(rows, weight, bias, eps, activation)
        ctx.save_for_backward(rows, weight, mean, rstd)
        ctx.activation = activation
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        rows, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layer_norm_bwd(dy.contiguous().view(rows.shape), rows, weight, mean, rstd, ctx.activation)
        return dx.view(dy.shape), dw, db, None, None


def layer_norm(x, weight, bias, eps: float = 1e-5, activation: str = "linear"):
    """LN(act(x)) over the last dimension, with ``activation`` a key of ACTIVATIONS."""
    _check_device(x)
    return ActivationLayerNormFunction.apply(x, weight, bias, eps, ACTIVATIONS[activation])


def _check_device(x: torch.Tensor):
    if not x.is_cuda and not INTERPRETED:
        raise RuntimeError(
            f"--layernorm-impl=triton runs on CUDA tensors, got a tensor on {x.device}; use "
            "--layernorm-impl=torch on CPU (auto picks triton on a GPU machine, also under --cpu), "
            "or set TRITON_INTERPRET=1 before importing triton "
            "to run the kernels in Triton's (slow) interpreter"
        )


class TritonLayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm (same parameters and state dict) computed by the Triton kernels."""

    def __init__(self, normalized_shape: int, eps: float = 1e-5):
        if normalized_shape > MAX_WIDTH:
            raise ValueError(f"--layernorm-impl=triton handles widths up to {MAX_WIDTH}, got {normalized_shape}")
        super().__init__(normalized_shape, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)


class ActivationLayerNorm(nn.Module):
    """norm(act(x)) in one kernel, with the parameters of the LayerNorm ``norm`` passed at call time
    (so a layer keeps its ``ffn_layernorm.weight/bias`` names and checkpoints load either way)."""

    def __init__(self, activation: str):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"no fused kernel for --activation-fn={activation!r}; have {', '.join(ACTIVATIONS)}")
        self.activation = activation

    def forward(self, x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return layer_norm(x, norm.weight, norm.bias, norm.eps, self.activation)

    def extra_repr(self) -> str:
        return f"activation={self.activation}"

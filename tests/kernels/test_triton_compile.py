"""The Triton kernels compile for a CUDA GPU (sm_80) without one: Triton's interpreter, which runs
the numerical tests on CPU, accepts code that the compiler rejects (e.g. non-constexpr globals),
so this compiles every kernel variant through Triton's own CUDA pipeline down to a cubin."""
import pytest
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fairseq_normformer.kernels import triton_layer_norm as kernels

if kernels.INTERPRETED:
    pytest.skip("this session interprets the kernels instead of compiling them", allow_module_level=True)

FWD_SIGNATURE = {"X": "*{t}", "Y": "*{t}", "W": "*{t}", "B": "*{t}", "Mean": "*fp32", "Rstd": "*fp32",
                 "N": "i32", "eps": "fp32", "ACTIVATION": "constexpr", "BLOCK_N": "constexpr"}  # fmt: skip
BWD_SIGNATURE = {"X": "*{t}", "DY": "*{t}", "DX": "*{t}", "W": "*{t}", "Mean": "*fp32", "Rstd": "*fp32",
                 "DW_partial": "*fp32", "DB_partial": "*fp32", "M": "i32", "N": "i32", "ROWS_PER_PROGRAM": "i32",
                 "ACTIVATION": "constexpr", "BLOCK_N": "constexpr"}  # fmt: skip


def compile_for_sm80(kernel, signature: dict, dtype: str, activation: int, width: int):
    block, num_warps = kernels._launch_config(width)
    signature = {name: kind.format(t=dtype) for name, kind in signature.items()}
    source = ASTSource(kernel, signature, constexprs={"ACTIVATION": activation, "BLOCK_N": block})
    return triton.compile(source, target=GPUTarget("cuda", 80, 32), options={"num_warps": num_warps})


CASES = [("fp16", code, 3072) for code in sorted(set(kernels.ACTIVATIONS.values()))]
CASES += [("fp32", 0, 768), ("bf16", 0, 770)]


@pytest.mark.parametrize("dtype, activation, width", CASES)
def test_kernels_compile_to_cubin(dtype, activation, width):
    pairs = ((kernels._layer_norm_fwd_kernel, FWD_SIGNATURE), (kernels._layer_norm_bwd_kernel, BWD_SIGNATURE))
    for kernel, signature in pairs:
        compiled = compile_for_sm80(kernel, signature, dtype, activation, width)
        assert compiled.asm["cubin"], f"{kernel.__name__}: no cubin"

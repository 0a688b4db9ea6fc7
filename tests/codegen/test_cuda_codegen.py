"""CUDA C generation: the text of small kernels, and that nvcc compiles it to an sm_90 cubin (skipped with a
message where nvcc is not installed)."""
from __future__ import annotations

import subprocess

import pytest

import tensortune as tt
from tensortune.build import build_library, generate_source
from tensortune.codegen import codegen_cuda
from tensortune.errors import CodegenError
from tensortune.ops.schedule_helpers import simple_gpu_schedule
from tensortune.ops import conv2d_nchw, matmul_nn
from tensortune.runtime.nvcc import find_nvcc, nvcc_flags
from tensortune.te import MATH_FUNCTIONS, MathFunc

from gpu_cases import CUDA, needs_nvcc, tiled_matmul


def _elementwise():
    A = tt.te.placeholder((1000,), "float32", "A")
    B = tt.te.compute((1000,), lambda i: A[i] * 2.0 + 1.0, "B")
    s = tt.create_schedule(B)
    bo, bi = s[B].split(s[B].axis[0], 128)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    return s, [A, B]


def _math(dtype: str = "float32"):
    """Every math function of ``te.MATH_FUNCTIONS`` on each element, summed."""
    A = tt.te.placeholder((256,), dtype, "A")

    def body(i):
        x = A[i]
        terms = [tt.te.call(f, *[x] * MATH_FUNCTIONS[f].arity) for f in MathFunc]
        return sum(terms[1:], terms[0])

    B = tt.te.compute((256,), body, "B")
    s = tt.create_schedule(B)
    bo, bi = s[B].split(s[B].axis[0], 128)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    return s, [A, B]


@pytest.mark.parametrize("dtype, suffix", [("float32", "f"), ("float64", "")])
def test_math_functions_are_called_by_their_c_names(dtype, suffix):
    s, args = _math(dtype)
    src = codegen_cuda(tt.lower(s, args, "math"), CUDA)
    for f in MathFunc:
        assert f"{MATH_FUNCTIONS[f].c}{suffix}(" in src, f


def test_elementwise_kernel_text():
    s, args = _elementwise()
    src = codegen_cuda(tt.lower(s, args, "scale"), CUDA)
    assert 'extern "C" __global__ void __launch_bounds__(128) scale(const float* __restrict__ A, ' \
           'float* __restrict__ B) {' in src
    assert "const int32_t i_outer = (int32_t)blockIdx.x;" in src
    assert "const int32_t i_inner = (int32_t)threadIdx.x;" in src
    assert "if (i_outer * 128 + i_inner < 1000) {" in src  # the partial last block
    assert "B[i_outer * 128 + i_inner] = A[i_outer * 128 + i_inner] * 2.0f + 1.0f;" in src
    assert "// Launch: grid (8, 1, 1), block (128, 1, 1), 0 bytes of shared memory" in src
    assert "__shared__" not in src and "__syncthreads" not in src


def test_tiled_matmul_kernel_text():
    s, args = tiled_matmul()
    src = codegen_cuda(tt.lower(s, args, "mm"), CUDA)
    assert "extern __shared__ __align__(16) unsigned char tt_smem[];" in src
    assert "float* __restrict__ A_shared = (float*)(tt_smem + 0);  // shared [16, 8]" in src
    assert "float* __restrict__ B_shared = (float*)(tt_smem + 512);  // shared [8, 32]" in src
    assert src.count("__syncthreads();") == 2
    assert "__align__(16) float C_local[16];" in src
    assert "*(float4*)(&B_shared[" in src and "*(const float4*)(&B[" in src  # vector fill of B's rows
    assert "*(float4*)(&C[" in src and "*(const float4*)(&C_local[" in src  # vector write-back
    assert "__launch_bounds__(32)" in src


def test_generated_source_is_deterministic_and_goes_through_the_backend_table():
    s, args = tiled_matmul()
    func = tt.lower(s, args, "mm")
    assert generate_source(func, CUDA) == codegen_cuda(func, CUDA) == codegen_cuda(tt.lower(s, args, "mm"), CUDA)


def test_reserved_kernel_names_are_refused():
    s, args = _elementwise()
    for name in ("threadIdx", "float4"):
        with pytest.raises(CodegenError):
            codegen_cuda(tt.lower(s, args, name), CUDA)


@needs_nvcc
@pytest.mark.parametrize("case", ["elementwise", "math", "tiled_matmul", "matmul_default", "conv_default"])
def test_nvcc_compiles_generated_kernels_to_sm90_cubins(case):
    if case == "elementwise":
        s, args = _elementwise()
    elif case == "math":
        s, args = _math()
    elif case == "tiled_matmul":
        s, args = tiled_matmul(48, 40, 24, (8, 8), (2, 2), 4, 2)
    elif case == "matmul_default":
        op = matmul_nn(33, 65, 17)
        s, args = simple_gpu_schedule(op), list(op.args)
    else:
        op = conv2d_nchw(1, 3, 16, 16, 8, 3, stride=2, pad=1)
        s, args = op.default_schedule(CUDA), list(op.args)
    lib = build_library(tt.lower(s, args, "kernel"), CUDA)
    assert lib.data[:4] == b"\x7fELF"  # a cubin is an ELF image
    assert lib.launch is not None and lib.path().suffix == ".cubin"


@needs_nvcc
def test_nvcc_is_found_with_its_release_as_version(tmp_path):
    nvcc = find_nvcc()
    assert "release" in nvcc.version
    assert "-arch=sm_90" in nvcc_flags(CUDA)
    src = tmp_path / "k.cu"
    s, args = tiled_matmul()
    src.write_text(codegen_cuda(tt.lower(s, args, "mm"), CUDA))
    done = subprocess.run([nvcc.path, "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(src)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

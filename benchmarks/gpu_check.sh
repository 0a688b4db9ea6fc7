#!/bin/bash
# The GPU check, for a session that is lent a GPU machine (191 s on an H200 on 2026-12-04, start not counted):
#   1. here, once:           bash benchmarks/gpu_wheels.sh          (xgboost wheel into .whl/)
#   2. device tool, run:     command "bash benchmarks/gpu_check.sh", carry [".whl"], timeout_s 600
# It installs the carried wheels, checks every GPU operator against numpy on the GPU (tests/runtime/test_cuda_runtime.py
# and the benchmark's correctness pass), tunes matmul 4096 and ResNet-18 C1-C12 at batch 1 briefly, compares with
# PyTorch (cuBLAS/cuDNN, TF32 off) and writes $OUT/gpu_quick.json (or results/gpu/ without $OUT) and its log.
# GPU_PYTEST_S and GPU_BENCH_S cap the tests' and the benchmark's seconds (120, 480); GPU_CHECK_ARGS adds
# arguments of benchmarks/gpu.py (e.g. "--conv-trials 48 --batches 1 16").
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
DEST="${OUT:-results/gpu}"
mkdir -p "$DEST"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$DEST/nvidia_smi.txt"
nvcc --version | tail -1
python3 -c 'import sys, numpy; from importlib import metadata as m; print(sys.version.split()[0], "numpy", numpy.__version__,
    "cuda-bindings", m.version("cuda-bindings"), "xgboost", m.version("xgboost-cpu"))' 2>&1 | tee -a "$DEST/nvidia_smi.txt"
timeout "${GPU_PYTEST_S:-120}" python3 -m pytest -q -rs -x -p no:cacheprovider tests/runtime/test_cuda_runtime.py \
    tests/codegen/test_cuda_codegen.py 2>&1 | tee "$DEST/pytest.txt" | tail -25
timeout "${GPU_BENCH_S:-480}" python3 benchmarks/gpu.py --quick --json "$DEST/gpu_quick.json" --log "$DEST/gpu_quick.log.jsonl" \
    ${GPU_CHECK_ARGS:-} 2>&1 | tee "$DEST/gpu_quick.txt"

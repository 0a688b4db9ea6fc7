#!/bin/bash
# Run on a development machine (it has PyPI), in the repository root, before a GPU check: fetches the wheels
# that the GPU machine's image lacks (it has numpy, onnx, PyTorch with CUDA, cuda-python, nvcc; not xgboost)
# into .whl/, which git ignores. Then call the device tool with carry [".whl"] and run benchmarks/gpu_check.sh.
set -euo pipefail
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "xgboost-cpu==3.2.0"
ls -la .whl

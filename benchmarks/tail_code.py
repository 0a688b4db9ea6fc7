"""What tail code costs: matmul configs built with and without the lowering pass ``partition_tails``, and numpy.

A matmul whose register tile does not divide the matrix (997 rows, 1000 columns) clamps the rows of its last
tile and guards the copy-out of its last column panel. ``partition_tails`` gives every other tile code without
either; this script builds each given config both ways and times them and numpy (in a child process, without
this shell's OpenBLAS overrides) in turns, round after round, and prints medians and ratios to numpy.

    python benchmarks/tail_code.py                      # M1 (997x1000x512), four register tiles
    python benchmarks/tail_code.py --shape 257 384 769 --config '{"tile_y": ...}'
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics

from common import write_json

#: register tiles of M1 (997x1000x512): 14 and 13 rows x 2 vectors, 12 rows x 2 vectors, 11 rows x 1 vector
M1_CONFIGS = (
    {"tile_y": [72, 1, 14], "tile_x": [1, 32, 32], "tile_k": [1, 512], "order": [0, 1], "unroll_k": 1,
     "parallel": "outer"},
    {"tile_y": [7, 11, 13], "tile_x": [8, 4, 32], "tile_k": [64, 8], "order": [1, 0], "unroll_k": 1,
     "parallel": "outer_fused"},
    {"tile_y": [84, 1, 12], "tile_x": [1, 32, 32], "tile_k": [1, 512], "order": [0, 1], "unroll_k": 1,
     "parallel": "outer"},
    {"tile_y": [7, 13, 11], "tile_x": [63, 1, 16], "tile_k": [1, 512], "order": [0, 1], "unroll_k": 4,
     "parallel": "outer_fused"},
)


def build_both(task, config: dict) -> dict:
    """The config built with the full lowering pipeline ("with") and without ``partition_tails`` ("without")."""
    from tensortune.benchmarking.compare import build_config

    lowering = importlib.import_module("tensortune.lower.lower")
    index = task.space.index_of(config)
    if index is None:
        raise SystemExit(f"config {config} is not in the space of {task}")
    full = lowering.PASSES
    built = {"with": build_config(task, index)}
    try:
        lowering.PASSES = tuple(p for p in full if p[0] != "partition_tails")
        built["without"] = build_config(task, index)
    finally:
        lowering.PASSES = full
    return built


def main() -> None:
    from tensortune.autotvm.catalog import create_task
    from tensortune.benchmarking.compare import time_module
    from tensortune.benchmarking.peers import time_peers
    from tensortune.target import Target

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", type=int, nargs=3, default=(997, 1000, 512), metavar=("M", "N", "K"))
    p.add_argument("--config", action="append", type=json.loads, help="a config as JSON (repeatable; default: "
                   "four register tiles of M1)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    M, N, K = args.shape
    task = create_task("matmul", {"M": M, "N": N, "K": K}, target=Target.host())
    configs = args.config or list(M1_CONFIGS)
    kernels = {(i, way): b for i, c in enumerate(configs) for way, b in build_both(task, c).items()}
    gflops: dict = {key: [] for key in kernels} | {"numpy": []}
    for r in range(args.rounds):
        for key in (list(kernels) if r % 2 == 0 else list(kernels)[::-1]):
            module, op, inputs, expected = kernels[key]
            timed = time_module(module, inputs, op, expected, args.threads, 10, 40)
            if "error" in timed:
                raise SystemExit(f"config {configs[key[0]]} built {key[1]} the pass is wrong: {timed['error']}")
            gflops[key].append(task.flops / timed["median_s"] / 1e9)
        peer = time_peers(task, args.threads, 10, 40)["numpy"]
        gflops["numpy"].append(task.flops / peer["median_s"] / 1e9)
    numpy = gflops["numpy"]
    rows = []
    print(f"matmul {M}x{N}x{K}, {args.threads} threads, {args.rounds} rounds; numpy "
          f"{statistics.median(numpy):.0f} GFLOP/s")
    for i, config in enumerate(configs):
        row = {"config": config}
        for way in ("without", "with"):
            g = gflops[(i, way)]
            row[way] = {"gflops": statistics.median(g),
                        "vs_numpy": statistics.median([a / b for a, b in zip(g, numpy)])}
        rows.append(row)
        tile = f"{config['tile_y'][-1]}x{config['tile_x'][-1]}"
        print(f"  tile {tile:6s} without {row['without']['gflops']:5.0f} ({row['without']['vs_numpy']:.2f}x numpy)"
              f"  with {row['with']['gflops']:5.0f} ({row['with']['vs_numpy']:.2f}x numpy)")
    if args.json:
        write_json(args.json, {"shape": [M, N, K], "threads": args.threads, "numpy_gflops": numpy, "rows": rows})


if __name__ == "__main__":
    main()

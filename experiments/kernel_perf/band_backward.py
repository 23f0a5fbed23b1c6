"""The band backward (``BackwardConfig.band``, ``kernels.rmsnorm_backward_band_kernel``) against
the heuristic backward on wide rows (issue 17: 4096 x 65536 bf16 fwd+bwd is 0.88x quack on the
H100, its backward the column tiles after the row-dot launch, which move 5/3 of the bytes).

Each row is split over the C CTAs of a launch-made cluster, as the cluster backward's, but the
cluster meets once per band of K rows and holds no row over the meeting: phase 1 reads the band's
chunks (DRAM) and stores their partial sums of u * x, the cluster barrier, phase 2 reads the same
chunks again (L2) and writes dx; ``prefetch`` reads the next band between the barrier's arrive
and wait. Every config goes through ``ops.launch_backward`` (the dweight sum launch included, as
the heuristic's), is checked against float64 first, then timed under CUDA-graph replay in
interleaved rounds:

    PYTHONPATH=src python3 experiments/kernel_perf/band_backward.py [--json OUT] [--shapes MxN,..]

The kernel's own tests (CPU through the interpreter with C = 1, GPU with 2-8 CTAs a row) are in
``tests/kernel/test_cluster_backward.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton

from rmsnorm_kernel import config
from rmsnorm_kernel.config import BackwardConfig


def band_config(m: int, n: int, c: int, k: int, warps: int, per_sm: int, prefetch: bool, index):
    """A persistent grid of ``c``-CTA clusters, ``per_sm`` CTAs an SM's worth, each cluster whole
    bands of ``k`` rows but the last (``k`` = 0: the cluster kernel, one row a meeting)."""
    block = triton.next_power_of_2(-(-n // c))
    groups = max(1, min(m, config.sm_count(index) * per_sm // c))
    rows = -(-m // groups)
    if k:
        rows = -(-rows // k) * k
    return BackwardConfig(
        block, False, -(-m // rows), rows, warps, False, False,
        pdl=config.pdl_here(index), cluster=c, prefetch=prefetch, band=k,
    )  # fmt: skip


#: (C, K, warps, CTAs an SM's worth, prefetch); K = 0: the cluster kernel (a row a meeting).
#: Registers of the sm_90 builds at 65536 bf16 columns (compile_check.py, Triton 3.9, no GPU):
#: C = 8 at 16 warps K = 1 / 2: 100 / 124 (127 with prefetch), no spill; at 32 warps 48 / 64
#: (53 / 64 with prefetch), K = 4 spills 272 bytes with prefetch; at 8 warps K = 1 with prefetch
#: 165. Each is one CTA an SM; K = 4 at 16 warps, K = 8 and C = 4 at 16 warps spill (216-3200
#: bytes), so they are not timed.
GRID = [
    (8, 0, 16, 1, 1), (8, 1, 16, 1, 0), (8, 2, 16, 1, 0), (8, 2, 16, 1, 1), (8, 1, 32, 1, 0),
    (8, 2, 32, 1, 0), (8, 1, 32, 1, 1), (8, 2, 32, 1, 1), (8, 4, 32, 1, 1), (4, 2, 32, 1, 0),
    (8, 1, 8, 1, 1), (8, 2, 16, 2, 0),
]  # fmt: skip
SHAPES = [(4096, 65536, torch.bfloat16), (1024, 65536, torch.bfloat16),
          (2048, 32768, torch.bfloat16), (512, 131072, torch.bfloat16)]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=int, default=20, help="do_bench_cudagraph rep (ms)")
    p.add_argument("--shapes", default="4096x65536,2048x32768")
    args = p.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bwd_cluster_tune import backward_case, compare

    if not torch.cuda.is_available():
        raise SystemExit("band_backward.py times on a GPU (its CPU tests: test_cluster_backward)")
    index = torch.cuda.current_device()
    out = []
    for m, n, dtype in SHAPES:
        if args.shapes and f"{m}x{n}" not in args.shapes.split(","):
            continue
        cands = {"heuristic": None}
        for c, k, warps, per_sm, prefetch in GRID:
            if triton.next_power_of_2(-(-n // c)) * c != n or n // c > 16384:
                continue
            name = f"C{c} K{k} w{warps} x{per_sm}/SM" + (" pre" if prefetch else "")
            cands[name] = band_config(m, n, c, k, warps, per_sm, bool(prefetch), index)
        out.append(compare(backward_case(m, n, dtype), cands, args.rounds, args.rep))
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

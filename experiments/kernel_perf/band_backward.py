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
import statistics
import sys

import torch
import triton

from rmsnorm_kernel import config, ops
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
    from bwd_cluster_tune import backward_case

    if not torch.cuda.is_available():
        raise SystemExit("band_backward.py times on a GPU (its CPU tests: test_cluster_backward)")
    index = torch.cuda.current_device()
    out = []
    for m, n, dtype in SHAPES:
        if args.shapes and f"{m}x{n}" not in args.shapes.split(","):
            continue
        x, w, dy, rstd, dx_ref, dw_ref = backward_case(m, n, dtype)

        def run(cfg=None, x=x, w=w, dy=dy, rstd=rstd, dtype=dtype):
            return ops.launch_backward(dy, x, w, rstd, 0.0, None, dtype, config=cfg)

        def errs(dx, dw, dx_ref=dx_ref, dw_ref=dw_ref):
            torch.cuda.synchronize()
            e_dx = (dx.double() - dx_ref).abs().max().item()
            return e_dx, (dw.double() - dw_ref).abs().max().item()

        e_dx, e_dw = errs(*run())
        ulp = torch.finfo(dtype).eps * dx_ref.abs().max().item()
        cands = {"heuristic": run}
        for c, k, warps, per_sm, prefetch in GRID:
            if triton.next_power_of_2(-(-n // c)) * c != n or n // c > 16384:
                continue
            cfg = band_config(m, n, c, k, warps, per_sm, bool(prefetch), index)
            name = f"C{c} K{k} w{warps} x{per_sm}/SM" + (" pre" if prefetch else "")
            try:
                d_dx, d_dw = errs(*run(cfg))
            except Exception as e:  # reported, not timed
                print(f"  {m}x{n} {name}: FAILED {type(e).__name__}: {e}"[:300], flush=True)
                continue
            if d_dx > 1.5 * e_dx + ulp or d_dw > 1.5 * e_dw + 1e-3 * dw_ref.abs().max():
                print(f"  {m}x{n} {name}: WRONG dx {d_dx:.3g} ({e_dx:.3g}) dw {d_dw:.3g} "
                      f"({e_dw:.3g})", flush=True)  # fmt: skip
                continue
            cands[name] = lambda cfg=cfg: run(cfg)
        times = {name: [] for name in cands}
        for _ in range(args.rounds):
            for name, f in cands.items():
                times[name].append(triton.testing.do_bench_cudagraph(f, rep=args.rep) * 1e3)
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"{m}x{n} {dtype}")
        for name in sorted(med, key=med.get):
            gbs = 3 * m * n * x.element_size() / (med[name] * 1e-6) / 1e9
            print(f"  {name:26s} {med[name]:8.1f} us {gbs:6.0f} GB/s "
                  f"({med['heuristic'] / med[name]:.3f}x)", flush=True)  # fmt: skip
        out.append({"m": m, "n": n, "dtype": str(dtype), "us": med, "rounds": times,
                    "err_heuristic": [e_dx, e_dw]})  # fmt: skip
        del x, w, dy, rstd, dx_ref, dw_ref
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

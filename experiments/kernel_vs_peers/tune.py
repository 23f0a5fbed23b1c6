"""Sweep the launcher's heuristics (block width, warps, one-pass limits) on one GPU.

    python experiments/kernel_vs_peers/tune.py --out results/tune.json

Each variant is timed on ~512 MB of bf16 data so the GPU, not the host, is the bottleneck
(``triton.testing.do_bench``, median). The chosen constants in ``rmsnorm_kernel.ops`` come from
this sweep; rerun it on other hardware before changing them.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
import triton

from rmsnorm_kernel import ops

BYTES = 512 << 20


def rows_for(n: int, elem: int = 2) -> int:
    return max(1, BYTES // (n * elem))


def time_forward(m, n, warps, max_fused, loop_block):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ops.MAX_FUSED_N, ops.LOOP_BLOCK = max_fused, loop_block
    ops._num_warps = lambda block, warps=warps: warps
    fn = lambda: ops.launch_forward(x, w, None, 1e-6, 0.0, torch.bfloat16)  # noqa: E731
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def time_backward(m, n, warps, max_fused_bwd, tile):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, torch.bfloat16)
    ops.MAX_FUSED_N_BWD, ops.BWD_TILE = max_fused_bwd, tile
    if warps is not None:
        ops._num_warps = ops._bwd_num_warps = lambda block, warps=warps: warps
    fn = lambda: ops.launch_backward(dy, x, w, rstd, 0.0, None, torch.bfloat16)  # noqa: E731
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def sweep_programs_per_sm(out):
    """Backward persistent grid: programs per SM, with the launcher's own warps and limits."""
    rows = []
    for n in [1024, 2048, 4096, 8192, 16384, 32768]:
        m = rows_for(n)
        gb_b = 3 * m * n * 2 / 1e9
        for per_sm in [2, 4, 8, 16]:
            ops.MIN_PROGRAMS_PER_SM = ops.MAX_PROGRAMS_PER_SM = per_sm
            ms = time_backward(m, n, None, ops.MAX_FUSED_N_BWD, ops.BWD_TILE)
            r = dict(
                kind="bwd", M=m, N=n, programs_per_sm=per_sm, us=1e3 * ms, GBps=gb_b / ms * 1e3
            )
            rows.append(r)
            print(json.dumps(r), flush=True)
    with open(out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--programs-per-sm",
        action="store_true",
        help="sweep the backward grid only, with the launcher's heuristics",
    )
    args = parser.parse_args()
    if args.programs_per_sm:
        return sweep_programs_per_sm(args.out)
    defaults = (ops.MAX_FUSED_N, ops.LOOP_BLOCK, ops.MAX_FUSED_N_BWD, ops.BWD_TILE, ops._num_warps)
    rows = []
    for n in [1024, 4096, 8192, 16384, 32768, 65536, 262144]:
        m = rows_for(n)
        gb = 2 * m * n * 2 / 1e9
        for warps, (max_fused, loop_block) in itertools.product(
            [4, 8, 16, 32], [(65536, 8192), (8192, 4096), (8192, 8192), (16384, 8192)]
        ):
            if n <= 8192 and max_fused != 65536:
                continue  # the variants differ only above 8192 columns
            try:
                ms = time_forward(m, n, warps, max_fused, loop_block)
                r = dict(
                    kind="fwd",
                    M=m,
                    N=n,
                    warps=warps,
                    max_fused=max_fused,
                    block=loop_block,
                    us=1e3 * ms,
                    GBps=gb / ms * 1e3,
                )
            except Exception as err:  # noqa: BLE001 - a config that does not compile is a result
                r = dict(
                    kind="fwd",
                    M=m,
                    N=n,
                    warps=warps,
                    max_fused=max_fused,
                    block=loop_block,
                    error=str(err)[:120],
                )
            rows.append(r)
            print(json.dumps(r), flush=True)
        gb_b = 3 * m * n * 2 / 1e9
        for warps, (max_bwd, tile) in itertools.product(
            [4, 8, 16, 32], [(8192, 4096), (8192, 2048), (4096, 2048), (16384, 4096)]
        ):
            try:
                ms = time_backward(m, n, warps, max_bwd, tile)
                r = dict(
                    kind="bwd",
                    M=m,
                    N=n,
                    warps=warps,
                    max_fused=max_bwd,
                    block=tile,
                    us=1e3 * ms,
                    GBps=gb_b / ms * 1e3,
                )
            except Exception as err:  # noqa: BLE001
                r = dict(
                    kind="bwd",
                    M=m,
                    N=n,
                    warps=warps,
                    max_fused=max_bwd,
                    block=tile,
                    error=str(err)[:120],
                )
            rows.append(r)
            print(json.dumps(r), flush=True)
        torch.cuda.empty_cache()
    (ops.MAX_FUSED_N, ops.LOOP_BLOCK, ops.MAX_FUSED_N_BWD, ops.BWD_TILE, ops._num_warps) = defaults
    with open(args.out, "w") as f:
        json.dump(
            {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "rows": rows},
            f,
            indent=1,
        )
    best = {}
    for r in rows:
        if "us" in r:
            key = (r["kind"], r["N"])
            if key not in best or r["us"] < best[key]["us"]:
                best[key] = r
    for (kind, n), r in sorted(best.items()):
        default = [
            x
            for x in rows
            if x["kind"] == kind
            and x["N"] == n
            and "us" in x
            and x["max_fused"] == (65536 if kind == "fwd" else 8192)
            and x["block"] == (8192 if kind == "fwd" else 4096)
        ]
        print(
            f"{kind} N={n:>6} best {r['us']:7.1f}us {r['GBps']:5.0f}GB/s warps={r['warps']}"
            f" max_fused={r['max_fused']} block={r['block']} | current-limits by warps: "
            + " ".join(f"{d['warps']}:{d['us']:.0f}" for d in default)
        )


if __name__ == "__main__":
    main()

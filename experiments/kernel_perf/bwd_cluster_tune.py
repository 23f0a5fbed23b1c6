"""Tune the cluster backward (``BackwardConfig.cluster``: each row over the CTAs of a launch-made
thread-block cluster, x and dy read once) against the package's heuristic backward, per shape and
dtype, under CUDA-graph replay (kernel time only: the backward launches alone, the forward's rstd
made once), interleaved round by round.

Each candidate is ``(C, warps, CTAs an SM's worth, prefetch)``: C CTAs a row of ``block = N / C``
columns, ``groups = SMs * per_sm // C`` clusters walking ``cdiv(M, groups)`` rows each. Every
config is checked first: dx against float64 within the heuristic's own error (x 1.5, plus one
ulp of dx's dtype at its largest value), dweight against float64 likewise; a wrong one is
reported and not timed. sm_90 registers and spills of each compiled cluster kernel are listed.

    PYTHONPATH=src python3 experiments/kernel_perf/bwd_cluster_tune.py --json OUT.json [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

import torch
from triton.testing import do_bench_cudagraph

from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import BackwardConfig

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
#: (M, N, dtype): the bench's wide rows (4096 x 65536 misses quack's fwd+bwd), and neighbours.
SHAPES = [
    (4096, 65536, BF16),
    (1024, 65536, BF16),
    (2048, 32768, BF16),
    (512, 131072, BF16),
    (1024, 65536, FP32),
    # the plans' neighbourhood: other M, fp16, float32 at 32768, a ragged width
    (256, 32768, BF16),
    (1024, 32768, BF16),
    (8192, 32768, BF16),
    (2048, 32768, FP16),
    (2048, 32768, FP32),
    (2048, 24576, BF16),
    (4096, 65536, FP32),
    # fp16 lost to the column tiles at 2048 x 32768 on the H200 (53rd session): its other M
    (1024, 32768, FP16),
    (8192, 32768, FP16),
]
#: (C, warps, CTAs an SM's worth, prefetch) per element size of x. The first H100 run (45th
#: session, results/2026-12-06e_cluster_bwd/bwd_cluster_run1.txt) also timed 8 x 4096-8192 at 4-16
#: warps, 4 x 8192-16384 at 8-32, with and without prefetch: none came within 10% of these.
GRID = {
    2: [(2, 32, 1, False), (2, 16, 1, False), (4, 32, 1, False), (8, 32, 1, False)],
    4: [(2, 32, 1, False), (4, 32, 1, False), (8, 32, 1, True), (8, 32, 1, False)],
}


def cluster_config(
    m: int, n: int, c: int, warps: int, per_sm: int, prefetch: bool = False
) -> BackwardConfig | None:
    block = 1 << (-(-n // c) - 1).bit_length()
    if -(-n // block) != c:
        return None
    groups = max(1, min(m, config.sm_count(0) * per_sm // c))
    rows = -(-m // groups)
    groups = -(-m // rows)
    pdl = config.pdl_here(0)  # the sum launch's early start, as the heuristic's configs
    return BackwardConfig(
        block, False, groups, rows, warps, False, False, pdl=pdl, cluster=c, prefetch=prefetch
    )


def backward_case(m: int, n: int, dtype: torch.dtype, device: str = "cuda") -> tuple:
    """``(x, w, dy, rstd, dx_ref, dw_ref)`` of one shape, seeded: x and dy (M, N) and w (N,) in
    ``dtype``, rstd (M,) from the package's forward, and float64 dx (M, N) and dweight (N,)."""
    torch.manual_seed(0)
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.randn(m, n, device=device).to(dtype)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype)
    xd, wd, dyd = x.double(), w.double(), dy.double()
    r = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
    u = dyd * wd
    dx_ref = r * (u - xd * r * r * (u * xd).mean(-1, keepdim=True))
    return x, w, dy, rstd, dx_ref, (dyd * xd * r).sum(0)


def compare(case: tuple, cands: dict, rounds: int, rep: int, title: str = "") -> dict:
    """Check each named backward config (None: the heuristic's, which must be among them) of
    ``case`` (:func:`backward_case`) against float64 (within 1.5x the heuristic's error, plus
    an ulp of dx and 1e-3 of dweight's largest value), then time those that pass under CUDA-graph
    replay in ``rounds`` interleaved rounds; print them fastest first (cluster builds with
    their registers and spills) and return the JSON row."""
    x, w, dy, rstd, dx_ref, dw_ref = case
    m, n = x.shape

    def run(cfg):
        return ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)

    def errors(cfg):
        dx, dw = run(cfg)
        torch.cuda.synchronize()
        return (
            (dx.double() - dx_ref).abs().max().item(),
            (dw.double() - dw_ref).abs().max().item(),
        )

    e_dx, e_dw = errors(None)
    ulp = torch.finfo(x.dtype).eps * dx_ref.abs().max().item()
    ok, regs = {}, {}
    for name, cfg in cands.items():
        try:
            d_dx, d_dw = errors(cfg)
        except Exception as e:  # a config that does not compile or launch: reported
            print(f"  {m}x{n} {x.dtype} {name}: FAILED {type(e).__name__}: {e}"[:400])
            continue
        good = d_dx <= 1.5 * e_dx + ulp and d_dw <= 1.5 * e_dw + 1e-3 * dw_ref.abs().max()
        if not good:
            print(f"  {m}x{n} {x.dtype} {name}: WRONG dx err {d_dx:.3g} (heuristic {e_dx:.3g})"
                  f" dw err {d_dw:.3g} (heuristic {e_dw:.3g})")  # fmt: skip
            continue
        ok[name] = cfg
        if cfg is not None and cfg.cluster:
            clustered = list(ops.BACKWARD_CLUSTER._clustered.values())
            if clustered:
                regs[name] = (clustered[-1].n_regs, clustered[-1].n_spills)
    times = {name: [] for name in ok}
    for _ in range(rounds):
        for name, cfg in ok.items():
            times[name].append(do_bench_cudagraph(lambda cfg=cfg: run(cfg), rep=rep) * 1e3)
    med = {name: statistics.median(t) for name, t in times.items()}
    gbs = {name: 3 * m * n * x.element_size() / (us * 1e-6) / 1e9 for name, us in med.items()}
    print(f"{m}x{n} {x.dtype} {title}", flush=True)
    for name in sorted(med, key=med.get):
        extra = f" regs {regs[name][0]} spills {regs[name][1]}" if name in regs else ""
        print(f"  {name:44s} {med[name]:8.1f} us  {gbs[name]:6.0f} GB/s "
              f"({med['heuristic'] / med[name]:.3f}x){extra}", flush=True)  # fmt: skip
    return {
        "m": m,
        "n": n,
        "dtype": str(x.dtype),
        "us": med,
        "rounds": times,
        "regs": regs,
        "err": {"heuristic": [e_dx, e_dw]},
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=int, default=20, help="do_bench_cudagraph rep (ms)")
    p.add_argument("--shapes", default="", help="only these, comma-separated MxN (every dtype)")
    args = p.parse_args()
    out = []
    for m, n, dtype in SHAPES:
        if args.shapes and f"{m}x{n}" not in args.shapes.split(","):
            continue
        case = backward_case(m, n, dtype)
        x = case[0]

        base = config.backward_config(
            m, n, 0, itemsize=x.element_size(), tma=False
        )  # (no TMA plan at these widths)
        plans, config.BWD_CLUSTER_LAUNCH = config.BWD_CLUSTER_LAUNCH, {}
        tiles = config._backward_geometry(m, n, 0, False, None, x.element_size(), False)
        tiles = dataclasses.replace(tiles, pdl=config.pdl_here(0))
        config.BWD_CLUSTER_LAUNCH = plans
        cands = {"heuristic": None}
        if tiles != base:  # the column tiles after the row-dot launch, as before the plans
            cands["tiles (no cluster plan)"] = tiles
        for c, warps, per_sm, prefetch in GRID[min(x.element_size(), 4)]:
            cfg = cluster_config(m, n, c, warps, per_sm, prefetch)
            if cfg is not None:
                name = f"cluster {c}x{cfg.block} w{warps} x{per_sm}/SM g{cfg.groups}"
                cands[name + (" prefetch" if prefetch else "")] = cfg
        row = compare(case, cands, args.rounds, args.rep, f"heuristic {base}")
        out.append({**row, "heuristic": str(base)})
        del x, case
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

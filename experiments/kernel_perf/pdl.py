"""Programmatic dependent launch (PDL, ``config.PDL``) between our kernels, measured, and the
dweight sum launch's cost.

Question: how much of the backward's time at large M is the second launch (the dweight sum,
``kernels.dweight_sum_kernel``) and the gap before it, and does PDL (Hopper: a kernel launched
with ``launch_pdl`` may start while the grid before it drains, and waits in
``kernels.common._pdl_prologue`` before touching memory) take that gap away, between the backward's
launches and between the forward and the backward?

Variants, graph replay (``triton.testing.do_bench_cudagraph``, kernel time only), µs, bf16,
interleaved rounds so the spread shows; every config is the heuristic's with ``pdl`` set:
- ``bwd`` / ``bwd_pdl``: ``ops.launch_backward`` (row kernel, then the sum launch);
- ``bwd_rows_only``: ``bwd`` with the sum launch skipped (what the finish costs: the difference);
- ``fb`` / ``fb_pdl``: ``launch_forward`` then ``launch_backward``; ``fb_fwd_pdl``: the forward
  launched with PDL too (``ForwardConfig.pdl``, an explicit option);
- ``ag_before`` / ``ag_nopdl`` / ``ag``: ``rmsnorm_kernel.rmsnorm`` forward + ``autograd.grad``
  (the bench's pass): as before this session (no PDL, the sum launch's 128-column strips), without
  PDL, and the heuristics as they are;
- ``sum_G_N``: the sum launch alone over the heuristic's partials, BLOCK_G x BLOCK_N per step.

y, rstd, dx and dweight with PDL are compared bit for bit with the launches without it.

    PYTHONPATH=src python3 experiments/kernel_perf/pdl.py --out OUT/pdl.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch
import triton

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, kernels, ops

EPS = 1e-6
SHAPES = [(16384, 4096), (65536, 1024), (8192, 4096), (16384, 2048), (4096, 4096)]
SUMS = [(32, 4), (32, 8), (32, 16), (32, 32), (32, 64), (32, 128), (16, 32), (64, 64)]
ROUNDS = 3


class Skip:
    def launch(self, *args, **kwargs) -> None:
        pass


DW_SUM = ops.DW_SUM
SUM_BLOCK_N = ops.SUM_BLOCK_N
HEURISTICS = (ops.forward_config, ops.backward_config)


def no_pdl(on: bool) -> None:
    """The heuristics as ``ops`` calls them, with PDL (``on`` False) switched off; the cached
    functions stay as they are."""
    if on:
        ops.forward_config, ops.backward_config = (
            lambda *a, _h=h, **k: dataclasses.replace(_h(*a, **k), pdl=False) for h in HEURISTICS
        )
    else:
        ops.forward_config, ops.backward_config = HEURISTICS


def us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")


def run_shape(m: int, n: int, rows: list, rounds: int = ROUNDS) -> None:
    """Every variant at ``m`` x ``n`` bf16, ``rounds`` interleaved rounds, into ``rows``."""
    torch.manual_seed(0)
    dt = torch.bfloat16
    x = torch.randn(m, n, device="cuda", dtype=dt)
    w = torch.randn(n, device="cuda", dtype=dt)
    dy = torch.randn(m, n, device="cuda", dtype=dt)
    index = x.device.index
    tma = ops.tma_ready(x, n) and m >= config.TMA_MIN_M and (n, 2) in config.BWD_TMA
    fc0 = config.forward_config(m, n, index, False, dt, n * x.element_size())  # as ops asks
    fc = {p: dataclasses.replace(fc0, pdl=bool(p > 1)) for p in (0, 1, 2)}
    bc0 = config.backward_config(m, n, index, itemsize=2, tma=tma)
    bc = {p: dataclasses.replace(bc0, pdl=bool(p)) for p in (0, 1, 2)}
    _, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, dt, config=fc[0])

    def fwd(p):
        return ops.launch_forward(x, w, None, EPS, 0.0, dt, config=fc[p])

    def bwd(p, r=rstd):
        return ops.launch_backward(dy, x, w, r, 0.0, None, dt, config=bc[p])

    def fb(p):
        y, _, r = fwd(p)
        return (y, r, *bwd(p, r))

    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()

    def ag():
        return torch.autograd.grad(rk.rmsnorm(xg, wg, eps=EPS), (xg, wg), dy)

    base = fb(0)
    same = {
        name: all(torch.equal(a, b) for a, b in zip(base, fb(p), strict=True))
        for name, p in (("fb_pdl", 1), ("fb_fwd_pdl", 2))
    }
    variants = {
        "bwd": (lambda: bwd(0), False),
        "bwd_rows_only": (lambda: bwd(0), True),
        "bwd_pdl": (lambda: bwd(1), False),
        "fb": (lambda: fb(0), False),
        "fb_pdl": (lambda: fb(1), False),
        "fb_fwd_pdl": (lambda: fb(2), False),
        "ag_before": (ag, False),
        "ag_nopdl": (ag, False),
        "ag": (ag, False),
    }
    groups = max(1, bc0.groups)
    part = torch.randn(groups, n, device="cuda", dtype=torch.float32)
    dw = torch.empty(n, device="cuda", dtype=dt)
    for r in range(rounds):
        for name, (fn, skip_sum) in variants.items():
            ops.DW_SUM = Skip() if skip_sum else DW_SUM
            no_pdl(name in ("ag_nopdl", "ag_before"))
            ops.SUM_BLOCK_N = 128 if name == "ag_before" else SUM_BLOCK_N
            try:
                t = us(fn)
                rows.append(dict(M=m, N=n, variant=name, round=r, us=t))
                print(f"{m}x{n} {name} round {r}: {t:.2f} us", flush=True)
            except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                rows.append(dict(M=m, N=n, variant=name, round=r, error=repr(e)[:300]))
                print(f"{m}x{n} {name}: {e!r}"[:300], flush=True)
            finally:
                ops.DW_SUM, ops.SUM_BLOCK_N = DW_SUM, SUM_BLOCK_N
                no_pdl(False)
        for bg, bn in SUMS:

            def one_sum(bg=bg, bn=bn):
                grid = (triton.cdiv(n, bn),)
                kernels.dweight_sum_kernel[grid](part, dw, groups, n, BLOCK_G=bg, BLOCK_N=bn)

            t = us(one_sum)
            rows.append(dict(M=m, N=n, variant=f"sum_{bg}_{bn}", groups=groups, round=r, us=t))
            print(f"{m}x{n} sum G{bg} N{bn} ({groups} partials): {t:.2f} us", flush=True)
    rows.append(dict(M=m, N=n, forward=repr(fc0), backward=repr(bc0), bitwise_same=same))
    print(f"{m}x{n} {fc0} {bc0}; PDL results bitwise equal: {same}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="the first this many SHAPES")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    args = ap.parse_args()
    rows: list = []
    for m, n in SHAPES[: args.shapes]:
        run_shape(m, n, rows, args.rounds)
        torch.cuda.empty_cache()
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

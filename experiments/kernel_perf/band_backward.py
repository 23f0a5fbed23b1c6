"""A prototype for the wide-row backward (issue 17: 4096 x 65536 bf16 fwd+bwd is 0.88x quack on
the H100): each row split over the C CTAs of a launch-made cluster, as the cluster backward
(``kernels.rmsnorm_backward_cluster_kernel``), but the cluster meets once per *band* of K rows
instead of once per row, and x and dy are not held in registers over the meeting: phase 1 reads
the band's K rows of the CTA's chunk (DRAM) and stores their partial sums of u * x; the cluster
barrier; phase 2 reads the same K row chunks again (L2: the cluster's band is K * N * 4 bytes of
x and dy, ~1-8 MiB) and writes dx. DRAM moves x, dy and dx once (the column tiles after the
row-dot launch read x and dy twice: 5/3 of that), and registers stay low enough for several
CTAs an SM, so one cluster's wait overlaps another's loads (the cluster backward, one CTA an SM,
waited for its slowest CTA each row with nothing else in flight).

Prototype only: weight present, dy in one part, no dh, no dx2, torch rounding, float32
accumulation; dweight partials per cluster summed by ``torch.sum`` (a real plan would use the
package's fixed-order sum launch). Checked against float64 like ``bwd_cluster_tune.py``, then
timed against the package's heuristic backward (``ops.launch_backward``) under CUDA-graph
replay, interleaved rounds:

    PYTHONPATH=src python3 experiments/kernel_perf/band_backward.py [--json OUT] [--shapes MxN,..]

The CPU check (Triton's interpreter, C = 1: no cluster there) is
``tests/kernel/test_experiment_band_backward.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import triton
import triton.language as tl

from rmsnorm_kernel import config, kernels, ops
from rmsnorm_kernel.launch import CachedKernel

_ARRIVE = tl.constexpr("barrier.cluster.arrive.release.aligned;\nmov.u32 $0, 0;")
_WAIT = tl.constexpr("barrier.cluster.wait.acquire.aligned;\nmov.u32 $0, 0;")


@triton.jit
def _asm(code: tl.constexpr):
    tl.inline_asm_elementwise(code, "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _phase1(X, DY, PART, w, band, row_end, stride_x, stride_dy, start, cols, cmask, chunk,
            K: tl.constexpr, C_POW2: tl.constexpr):  # fmt: skip
    """A band's K row chunks from DRAM: their partial sums of u * x, stored for the cluster."""
    rows = band + tl.arange(0, K)
    rmask = rows < row_end
    mask = rmask[:, None] & cmask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + start + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(DY + rows[:, None] * stride_dy + start + cols[None, :], mask=mask, other=0.0)
    total = tl.sum(dy.to(tl.float32) * w[None, :] * x.to(tl.float32), axis=1)  # (K,)
    tl.store(PART + rows * C_POW2 + chunk, total, mask=rmask)


@triton.jit
def _phase2(X, DY, RSTD, DX, PART, w, band, row_end, stride_x, stride_dy, N, start, cols, cmask,
            K: tl.constexpr, C: tl.constexpr, C_POW2: tl.constexpr):  # fmt: skip
    """After the meeting: the row totals from the C partials (chunk order), the same chunks
    again (L2 hits), dx stored; returns the band's dweight terms (BLOCK,)."""
    rows = band + tl.arange(0, K)
    rmask = rows < row_end
    mask = rmask[:, None] & cmask[None, :]
    k = tl.arange(0, C_POW2)
    parts = tl.load(
        PART + rows[:, None] * C_POW2 + k[None, :],
        mask=rmask[:, None] & (k[None, :] < C),
        other=0.0,
        cache_modifier=".cg",
    )
    total = tl.sum(parts, axis=1)
    x = tl.load(X + rows[:, None] * stride_x + start + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(DY + rows[:, None] * stride_dy + start + cols[None, :], mask=mask, other=0.0)
    xf = x.to(tl.float32)
    dyf = dy.to(tl.float32)
    rstd = tl.load(RSTD + rows, mask=rmask, other=0.0)
    dx = kernels._dx(dyf * w[None, :], xf, rstd[:, None], (total / N)[:, None])
    tl.store(DX + rows[:, None] * N + start + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
    return tl.sum((dyf * xf) * rstd[:, None], axis=0)


@triton.jit(do_not_specialize=["M", "rows_per_program"])
def band_backward_kernel(
    DY, X, W, RSTD, DX, DW_PARTIAL, PART,
    stride_dy, stride_x, stride_w, M, N, rows_per_program,
    BLOCK: tl.constexpr,  # columns per CTA (power of two), C * BLOCK >= N
    K: tl.constexpr,  # rows per band (power of two): one cluster meeting per band
    C: tl.constexpr,  # CTAs a row (one cluster)
    C_POW2: tl.constexpr,
    PIPE: tl.constexpr,  # read band b + 1 before waiting for band b's meeting (arrive / wait split)
):  # fmt: skip
    """``PART`` (M, C_POW2) float32 scratch; ``DW_PARTIAL`` (groups, N) float32. Through the
    interpreter (no clusters, no barrier): C = 1 only."""
    pid = tl.program_id(0)
    group = pid // C
    chunk = pid % C
    row_start = group.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    start = chunk * BLOCK
    cols = tl.arange(0, BLOCK)
    cmask = cols < N - start
    w = tl.load(W + (start + cols) * stride_w, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    if PIPE:
        # arrive(b) after band b's partials; band b + 1 read; wait(b); band b's dx; arrive(b + 1)
        _phase1(X, DY, PART, w, row_start, row_end, stride_x, stride_dy, start, cols, cmask,
                chunk, K, C_POW2)  # fmt: skip
        if C > 1:
            _asm(_ARRIVE)
        for band in range(row_start + K, row_end, K):
            _phase1(X, DY, PART, w, band, row_end, stride_x, stride_dy, start, cols, cmask,
                    chunk, K, C_POW2)  # fmt: skip
            if C > 1:
                _asm(_WAIT)
            dw += _phase2(X, DY, RSTD, DX, PART, w, band - K, row_end, stride_x, stride_dy, N,
                          start, cols, cmask, K, C, C_POW2)  # fmt: skip
            if C > 1:
                _asm(_ARRIVE)
        if C > 1:
            _asm(_WAIT)
        last = row_start + (row_end - row_start - 1) // K * K
        dw += _phase2(X, DY, RSTD, DX, PART, w, last, row_end, stride_x, stride_dy, N, start, cols,
                      cmask, K, C, C_POW2)  # fmt: skip
    else:
        for band in range(row_start, row_end, K):
            _phase1(X, DY, PART, w, band, row_end, stride_x, stride_dy, start, cols, cmask,
                    chunk, K, C_POW2)  # fmt: skip
            if C > 1:
                _asm(kernels._CLUSTER_BARRIER)
            dw += _phase2(X, DY, RSTD, DX, PART, w, band, row_end, stride_x, stride_dy, N,
                          start, cols, cmask, K, C, C_POW2)  # fmt: skip
    tl.store(DW_PARTIAL + group.to(tl.int64) * N + start + cols, dw, mask=cmask)


BAND = CachedKernel(band_backward_kernel, cluster=True)


def band_backward(dy, x, w, rstd, c, k, warps, per_sm, pipe=False):
    """``dy, x`` (M, N) contiguous, ``w`` (N,), ``rstd`` (M,) float32 -> ``(dx, dw)``."""
    m, n = x.shape
    block = triton.next_power_of_2(-(-n // c))
    sms = config.sm_count(x.device.index or 0) if x.is_cuda else config.INTERPRETER_PROGRAMS
    groups = max(1, min(m, sms * per_sm // c))
    rows = -(-m // groups)
    rows = -(-rows // k) * k  # whole bands per cluster but the last one's
    groups = -(-m // rows)
    c_pow2 = 1 << (c - 1).bit_length()
    dx = torch.empty_like(x)
    partial = torch.empty(groups, n, device=x.device, dtype=torch.float32)
    part = torch.empty(m * c_pow2, device=x.device, dtype=torch.float32)
    index = x.device.index if x.is_cuda else None
    BAND.launch(
        (groups,),
        (dy, x, w, rstd, dx, partial, part, dy.stride(0), x.stride(0), w.stride(0), m, n, rows),
        (),
        (block, k, c, c_pow2, pipe),
        warps,
        1,
        index,
        c,
    )
    return dx, partial.sum(0).to(w.dtype)


#: (C, K, warps, CTAs an SM's worth, pipelined)
GRID = [
    (8, 1, 16, 1, 0), (8, 2, 16, 1, 0), (8, 4, 16, 1, 0), (8, 2, 16, 2, 0), (8, 4, 8, 2, 0),
    (8, 2, 8, 4, 0), (4, 2, 32, 1, 0), (8, 2, 16, 1, 1), (8, 4, 16, 1, 1), (8, 2, 8, 2, 1),
]  # fmt: skip
SHAPES = [(4096, 65536, torch.bfloat16), (1024, 65536, torch.bfloat16),
          (2048, 32768, torch.bfloat16), (512, 131072, torch.bfloat16)]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=int, default=20)
    p.add_argument("--shapes", default="4096x65536,2048x32768")
    args = p.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bwd_cluster_tune import backward_case

    if not torch.cuda.is_available():
        raise SystemExit(
            "band_backward.py times on a GPU; the CPU check (the interpreter, one CTA a row) is "
            "tests/kernel/test_experiment_band_backward.py"
        )
    out = []
    for m, n, dtype in SHAPES:
        if args.shapes and f"{m}x{n}" not in args.shapes.split(","):
            continue
        x, w, dy, rstd, dx_ref, dw_ref = backward_case(m, n, dtype)

        def heuristic(x=x, w=w, dy=dy, rstd=rstd, dtype=dtype):
            return ops.launch_backward(dy, x, w, rstd, 0.0, None, dtype)

        def errs(dx, dw, dx_ref=dx_ref, dw_ref=dw_ref):
            torch.cuda.synchronize()
            return (dx.double() - dx_ref).abs().max().item(), (
                dw.double() - dw_ref
            ).abs().max().item()

        e_dx, e_dw = errs(*heuristic())
        ulp = torch.finfo(dtype).eps * dx_ref.abs().max().item()
        cands = {"heuristic": heuristic}
        for c, k, warps, per_sm, pipe in GRID:
            if triton.next_power_of_2(-(-n // c)) * c != n or n // c > 16384:
                continue
            name = f"band C{c} K{k} w{warps} x{per_sm}/SM" + (" pipe" if pipe else "")

            def run(c=c, k=k, warps=warps, per_sm=per_sm, pipe=pipe, x=x, w=w, dy=dy, rstd=rstd):
                return band_backward(dy, x, w, rstd, c, k, warps, per_sm, pipe)

            try:
                d_dx, d_dw = errs(*run())
            except Exception as e:  # reported, not timed
                print(f"  {m}x{n} {name}: FAILED {type(e).__name__}: {e}"[:300])
                continue
            if d_dx > 1.5 * e_dx + ulp or d_dw > 1.5 * e_dw + 1e-3 * dw_ref.abs().max():
                print(
                    f"  {m}x{n} {name}: WRONG dx {d_dx:.3g} ({e_dx:.3g}) dw {d_dw:.3g} ({e_dw:.3g})"
                )
                continue
            cands[name] = run
        times = {name: [] for name in cands}
        for _ in range(args.rounds):
            for name, f in cands.items():
                times[name].append(triton.testing.do_bench_cudagraph(f, rep=args.rep) * 1e3)
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"{m}x{n} {dtype}")
        for name in sorted(med, key=med.get):
            gbs = 3 * m * n * x.element_size() / (med[name] * 1e-6) / 1e9
            print(f"  {name:32s} {med[name]:8.1f} us {gbs:6.0f} GB/s "
                  f"({med['heuristic'] / med[name]:.3f}x)")  # fmt: skip
        out.append({"m": m, "n": n, "dtype": str(dtype), "us": med, "rounds": times,
                    "err_heuristic": [e_dx, e_dw]})  # fmt: skip
        del x, w, dy, rstd, dx_ref, dw_ref
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

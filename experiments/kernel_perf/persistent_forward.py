"""A persistent, software-pipelined one-row forward, timed by tune.py part ``persistfwd`` beside
the package's kernel. Not used by the package.

The package's forward for 1024 < N <= 32768 launches one program per row (grid = M): a program
loads its row, reduces, scales and stores, and the next row's load waits for a new program.
At 32768 columns a 32-warp program fills an SM alone, so nothing overlaps that load's latency
(bench 2026-11-30: 2048 x 32768 74.2 us against quack's 65.8). Here a grid of ``per_sm``
programs per SM walks rows ``pid, pid + G, ...`` with ``tl.range(num_stages=STAGES)``: Triton
issues the next rows' loads (asynchronous copies into shared memory) while the current row is
reduced, as the package's backward row loop does. The weight is loaded once per program.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import rmsnorm_kernel  # noqa: F401  (picks the interpreter on a machine without CUDA)
from rmsnorm_kernel.config import sm_count


@triton.jit
def persistent_forward_kernel(
    X,  # (M, N) contiguous
    W,  # (N,)
    Y,  # (M, N), x's dtype
    RSTD,  # (M,) float32
    M,
    N,
    eps,
    BLOCK: tl.constexpr,  # >= N: the whole row in registers
    STAGES: tl.constexpr,  # software pipelining of the row loop (1: none)
):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    start = tl.program_id(0).to(tl.int64)  # int64 row offsets: M * N may pass 2**31
    for row in tl.range(start, M, tl.num_programs(0), num_stages=STAGES):
        base = row * N
        x = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)  # / N, never / BLOCK
        tl.store(Y + base + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
        tl.store(RSTD + row, rstd)


def launch(x, w, eps, warps, stages, per_sm):
    """``(y, rstd)`` of contiguous ``x (M, N)`` with weight ``w (N,)``; ``per_sm`` programs per SM
    (the interpreter: 3 programs, so CPU checks still cover a strided row loop)."""
    m, n = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty((m,), device=x.device, dtype=torch.float32)
    if x.is_cuda:
        sms = sm_count(x.device.index)
        grid = max(1, min(m, sms * per_sm))
    else:
        grid = min(m, 3)
    persistent_forward_kernel[(grid,)](
        x, w, y, rstd, m, n, eps, BLOCK=triton.next_power_of_2(n), STAGES=stages, num_warps=warps
    )
    return y, rstd

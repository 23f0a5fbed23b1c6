"""dweight's finish as a second launch: column sums of the programs' partials in a fixed order."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import _pdl_prologue


@triton.jit
def dweight_sum_kernel(
    PARTIAL,  # pointer to the per-program partials (G, N), float32 or float64
    DW,  # pointer to the weight gradient (N,), weight dtype
    G,  # number of partial rows
    N,  # data width
    BLOCK_G: tl.constexpr,  # partial rows summed at once
    BLOCK_N: tl.constexpr,  # columns per program
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """The dweight finish as a second launch (large tensors, where it beats the in-launch tree's
    sequential tail): column sums of the partials in a fixed order."""
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float64)
    for start in range(0, G, BLOCK_G):
        rows = start + tl.arange(0, BLOCK_G)
        mask = (rows[:, None] < G) & col_mask[None, :]
        acc += tl.load(
            PARTIAL + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0
        ).to(tl.float64)  # exact for float32 partials
    total = tl.sum(acc, axis=0)
    if DW.dtype.element_ty == tl.float64:
        tl.store(DW + cols, total, mask=col_mask)
    else:
        tl.store(DW + cols, total.to(tl.float32).to(DW.dtype.element_ty), mask=col_mask)

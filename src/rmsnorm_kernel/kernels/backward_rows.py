"""The backward for short rows: ``ROWS`` rows per step, so each step moves enough bytes and
their row reductions run side by side; the weight is read once per program."""

from __future__ import annotations

import triton
import triton.language as tl

from .backward_parts import _dw_term, _dweight_finish, _dx, _dy_sum
from .common import _pdl_prologue


@triton.jit(do_not_specialize=["M", "rows_per_program"])
def rmsnorm_backward_rows_kernel(
    DY,  # pointer to the upstream gradient rows, row stride stride_dy, unit column stride
    X,  # pointer to the normalised input rows (x, or x + residual), row stride stride_x
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    RSTD,  # pointer to the inverse RMS per row saved by the forward pass (M,)
    DH,  # pointer to the gradient of the returned x + residual (read only when HAS_DH)
    DY_B,  # pointers to dy's other parts (read only when DY_PARTS > 1, resp. 3)
    DY_C,
    DX,  # pointer to the input gradient (M, N), contiguous
    DX2,  # pointer to a second copy of dx in another dtype (M, N), contiguous (when HAS_DX2)
    DW,  # pointer to the weight gradient (N,), weight dtype (written only when HAS_WEIGHT)
    DW_PARTIAL,  # pointer to the per-program dweight partials (groups, N), as in the row kernel
    COUNTERS,  # pointer to int32 tree counters (groups,), zero on entry and on exit
    stride_dy,
    stride_x,
    stride_dh,
    stride_w,  # elements between two values of W
    stride_dy_b,
    stride_dy_c,
    M,  # number of rows
    N,  # data width
    rows_per_program,  # program p owns rows [p * rows_per_program, (p + 1) * rows_per_program)
    offset,  # u = dy * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    DY_PARTS: tl.constexpr,
    DY_SUM: tl.constexpr,
    HAS_DX2: tl.constexpr,  # also store dx in DX2's dtype (the Inductor pass's dx cast)
    LLAMA: tl.constexpr,
    ACC: tl.constexpr,
    DW_ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # >= N, a power of two: whole rows
    ROWS: tl.constexpr,  # rows per step: a (ROWS, BLOCK) tile
    STAGES: tl.constexpr,  # software pipelining depth of the step loop
    TREE: tl.constexpr,
    FANOUT: tl.constexpr,
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """Short rows: the backward of :func:`rmsnorm_backward_kernel` (one tile per row), ``ROWS``
    rows per step, so each step moves enough bytes and its ROWS row reductions run side by side
    instead of one after another. The weight is read once per program.

    dweight: each of the ROWS lanes sums its rows in order; the lanes are summed once at the end
    (a fixed reduction of the compiled kernel), so the partial is a fixed-order sum.
    """
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    groups = tl.num_programs(0)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    row_start = pid.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N
    if HAS_WEIGHT:
        w = tl.load(W + cols * stride_w, mask=col_mask, other=0.0).to(ACC) + offset
    dw = tl.zeros([ROWS, BLOCK], dtype=DW_ACC)
    for first in tl.range(row_start, row_end, ROWS, num_stages=STAGES):
        rows = first + tl.arange(0, ROWS)
        row_mask = rows < row_end
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(ACC)
        dy = _dy_sum(
            tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0),
            DY_B + rows[:, None] * stride_dy_b + cols[None, :],
            DY_C + rows[:, None] * stride_dy_c + cols[None, :],
            mask,
            DY_PARTS,
            DY_SUM,
            ACC,
        )
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)[:, None]
        if HAS_WEIGHT:
            u = dy * w[None, :]
        else:
            u = dy
        mean_ux = (tl.sum(u * x, axis=1) / N)[:, None]
        dx = _dx(u, x, rstd, mean_ux)
        if HAS_DH:
            dh = tl.load(DH + rows[:, None] * stride_dh + cols[None, :], mask=mask, other=0.0)
            dx += dh.to(ACC)
        tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_DX2:
            dx2_ptrs = DX2 + rows[:, None] * N + cols[None, :]
            tl.store(dx2_ptrs, dx.to(DX2.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw += _dw_term(dy, x, rstd, LLAMA, X.dtype.element_ty, DW_ACC)  # masked rows add 0
    if HAS_WEIGHT:
        _dweight_finish(
            tl.sum(dw, axis=0),
            DW,
            DW_PARTIAL,
            COUNTERS,
            pid,
            groups,
            N,
            cols,
            col_mask,
            TREE,
            FANOUT,
        )

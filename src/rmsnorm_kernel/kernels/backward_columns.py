"""The small-M backward in one launch, with no partials and no second pass: row programs write dx
as the tile backward does, column-strip programs sum dweight over all M rows in row order."""

from __future__ import annotations

import triton
import triton.language as tl

from .backward_parts import _dw_term, _dy_sum, _row_backward
from .common import _pdl_prologue


@triton.jit(do_not_specialize=["M", "rows_per_program"])
def rmsnorm_backward_columns_kernel(
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
    stride_dy,
    stride_x,
    stride_dh,
    stride_w,  # elements between two values of W
    stride_dy_b,
    stride_dy_c,
    M,  # number of rows
    N,  # data width
    rows_per_program,  # row program p owns rows [p * rows_per_program, (p + 1) * rows_per_program)
    row_programs,  # programs [0, row_programs) compute dx; the others one dweight column strip
    offset,  # u = dy * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    DY_PARTS: tl.constexpr,
    DY_SUM: tl.constexpr,
    HAS_DX2: tl.constexpr,
    LLAMA: tl.constexpr,
    ACC: tl.constexpr,
    DW_ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # >= N, a power of two: whole rows
    STAGES: tl.constexpr,  # software pipelining depth of the row programs' loop
    COL_BLOCK: tl.constexpr,  # columns of one dweight strip
    COL_ROWS: tl.constexpr,  # rows per step of a strip: a (COL_ROWS, COL_BLOCK) tile
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """Small M: dx and dweight in one launch, with no partials and no second pass.

    dweight needs no dx: ``dw[j] = sum_i dy[i, j] * x[i, j] * rstd[i]`` (or Llama's rounded
    ``x * rstd``), with rstd saved by the forward. So the launch has two kinds of programs that
    never wait on each other. The first ``row_programs`` walk their rows as
    :func:`rmsnorm_backward_kernel` does and store dx. Each of the others sums one strip of
    ``COL_BLOCK`` columns over all M rows, ``COL_ROWS`` rows per step in row order, and stores
    that strip of dweight. The order of additions is fixed by the config alone: dweight is
    bitwise reproducible. Both kinds read x and dy (small M: the second read is from L2).
    """
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    if pid < row_programs:
        row_start = pid.to(tl.int64) * rows_per_program
        row_end = tl.minimum(row_start + rows_per_program, M)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        for row in tl.range(row_start, row_end, num_stages=STAGES):
            _row_backward(
                DY,
                X,
                W,
                RSTD,
                RSTD,  # MEAN_UX: unread (one tile per row)
                DH,
                DY_B,
                DY_C,
                DX,
                DX2,
                row,
                cols,
                mask,
                stride_dy,
                stride_x,
                stride_dh,
                stride_w,
                stride_dy_b,
                stride_dy_c,
                N,
                offset,
                HAS_WEIGHT,
                HAS_DH,
                DY_PARTS,
                DY_SUM,
                HAS_DX2,
                ACC,
                True,
            )
    else:
        # Names of their own: Triton types a name alike in both arms of a runtime branch.
        s_cols = (pid - row_programs) * COL_BLOCK + tl.arange(0, COL_BLOCK)
        s_col_mask = s_cols < N
        s_dw = tl.zeros([COL_BLOCK], dtype=DW_ACC)
        for first in tl.range(0, M, COL_ROWS):
            s_rows = first + tl.arange(0, COL_ROWS).to(tl.int64)  # int64 row offsets below
            s_row_mask = s_rows < M
            s_mask = s_row_mask[:, None] & s_col_mask[None, :]
            s_x = tl.load(X + s_rows[:, None] * stride_x + s_cols[None, :], mask=s_mask, other=0.0)
            s_dy = _dy_sum(
                tl.load(DY + s_rows[:, None] * stride_dy + s_cols[None, :], mask=s_mask, other=0.0),
                DY_B + s_rows[:, None] * stride_dy_b + s_cols[None, :],
                DY_C + s_rows[:, None] * stride_dy_c + s_cols[None, :],
                s_mask,
                DY_PARTS,
                DY_SUM,
                ACC,
            )
            s_rstd = tl.load(RSTD + s_rows, mask=s_row_mask, other=0.0)[:, None]
            # masked rows and columns load 0: their terms add 0
            s_term = _dw_term(s_dy, s_x.to(ACC), s_rstd, LLAMA, X.dtype.element_ty, DW_ACC)
            s_dw += tl.sum(s_term, axis=0)
        tl.store(DW + s_cols, s_dw.to(DW.dtype.element_ty), mask=s_col_mask)

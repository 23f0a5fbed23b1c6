"""The Triton kernels, and nothing else: forward, backward (dx + dweight partials), dweight sum.

Math for one row of ``N`` values (``ACC`` is float32, or float64 for float64 outputs)::

    r  = 1 / sqrt(sum(x*x) / N + eps)       # divide by N, the data width -- never by BLOCK
    y  = x * r * (offset + w)
    u  = dy * (offset + w)
    dx = (u - x * r*r * sum(u*x) / N) * r  (+ dh, the gradient of the returned x + residual)
    dw = sum over rows of dy * x * r        # per-program partials, then a fixed-order column sum

Every program follows the tutorial's rhythm: program id -> column offsets -> mask -> pointers ->
load as ACC -> reduce -> store. Row offsets are int64 so tensors over 2**31 elements are addressed
correctly. ``ONE_PASS`` rows fit one block of registers (``N <= BLOCK``); longer forward rows are
walked in chunks of ``BLOCK`` columns, and wide backward rows are split into column tiles after a
separate row reduction. There are no atomics: results are bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import backend  # noqa: F401  (sets TRITON_INTERPRET before @triton.jit runs)


@triton.jit
def rmsnorm_forward_kernel(
    X,  # pointer to the input rows, row stride stride_x, unit column stride
    RES,  # pointer to the residual rows (read only when HAS_RESIDUAL)
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    Y,  # pointer to the output (M, N), contiguous
    H,  # pointer to the output x + residual (M, N), contiguous (written only when HAS_RESIDUAL)
    RSTD,  # pointer to the inverse RMS per row (M,), ACC dtype, saved for the backward pass
    stride_x,  # elements between two rows of X
    stride_res,  # elements between two rows of RES
    N,  # data width: the number of values in a row
    eps,  # added to the mean of squares; float32 high part ...
    eps_lo,  # ... and low part (Triton passes Python floats as float32; fp64 needs both)
    offset,  # y = x * r * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    HAS_WEIGHT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK: tl.constexpr,  # work width: columns handled at once (a power of two)
    ONE_PASS: tl.constexpr,  # N <= BLOCK: the whole row stays in registers
):
    row = tl.program_id(0).to(tl.int64)
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)  # both parts are exact float32 values
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    x_row = X + row * stride_x
    res_row = RES + row * stride_res
    y_row = Y + row * N
    h_row = H + row * N
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
        if HAS_RESIDUAL:
            h = (x + tl.load(res_row + cols, mask=mask, other=0.0).to(ACC)).to(H.dtype.element_ty)
            tl.store(h_row + cols, h, mask=mask)
            x = h.to(ACC)  # normalise the rounded sum the caller receives
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        y = x * rstd
        if HAS_WEIGHT:
            y = y * (tl.load(W + cols, mask=mask, other=0.0).to(ACC) + offset)
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=mask)
    else:
        # Pass 1: sum of squares, chunk by chunk (and write x + residual on the way).
        sum_sq = tl.zeros([BLOCK], dtype=ACC)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = c < N
            x = tl.load(x_row + c, mask=mask, other=0.0).to(ACC)
            if HAS_RESIDUAL:
                h = (x + tl.load(res_row + c, mask=mask, other=0.0).to(ACC)).to(H.dtype.element_ty)
                tl.store(h_row + c, h, mask=mask)
                x = h.to(ACC)
            sum_sq += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(sum_sq, axis=0) / N + eps)
        # Pass 2: scale and store.
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = c < N
            if HAS_RESIDUAL:
                x = tl.load(h_row + c, mask=mask, other=0.0).to(ACC)
            else:
                x = tl.load(x_row + c, mask=mask, other=0.0).to(ACC)
            y = x * rstd
            if HAS_WEIGHT:
                y = y * (tl.load(W + c, mask=mask, other=0.0).to(ACC) + offset)
            tl.store(y_row + c, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + row, rstd)


@triton.jit
def rmsnorm_row_dot_kernel(
    DY,  # pointer to the upstream gradient rows, row stride stride_dy, unit column stride
    X,  # pointer to the normalised input rows (x, or x + residual), row stride stride_x
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    MEAN_UX,  # pointer to the output mean(u * x) per row (M,), ACC dtype
    stride_dy,
    stride_x,
    N,  # data width
    offset,  # u = dy * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # chunk width
):
    """Wide rows, backward step 1 of 2: the one row-wide reduction dx needs, mean(u * x)."""
    row = tl.program_id(0).to(tl.int64)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    cols = tl.arange(0, BLOCK)
    sum_ux = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, N, BLOCK):
        c = start + cols
        mask = c < N
        x = tl.load(X + row * stride_x + c, mask=mask, other=0.0).to(ACC)
        u = tl.load(DY + row * stride_dy + c, mask=mask, other=0.0).to(ACC)
        if HAS_WEIGHT:
            u = u * (tl.load(W + c, mask=mask, other=0.0).to(ACC) + offset)
        sum_ux += u * x
    tl.store(MEAN_UX + row, tl.sum(sum_ux, axis=0) / N)


@triton.jit
def rmsnorm_backward_kernel(
    DY,  # pointer to the upstream gradient rows, row stride stride_dy, unit column stride
    X,  # pointer to the normalised input rows (x, or x + residual), row stride stride_x
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    RSTD,  # pointer to the inverse RMS per row saved by the forward pass (M,)
    MEAN_UX,  # pointer to mean(u * x) per row (M,) from rmsnorm_row_dot_kernel (when not ONE_TILE)
    DH,  # pointer to the gradient of the returned x + residual (read only when HAS_DH)
    DX,  # pointer to the input gradient (M, N), contiguous
    DW_PARTIAL,  # pointer to the per-row-group dweight partials (groups, N), ACC dtype
    stride_dy,  # elements between two rows of DY
    stride_x,  # elements between two rows of X
    stride_dh,  # elements between two rows of DH
    M,  # number of rows
    N,  # data width
    offset,  # u = dy * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    rows_per_program,  # program (p, q) owns rows [p * rows_per_program, (p + 1) * rows_per_program)
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # columns per program: the whole row when ONE_TILE
    ONE_TILE: tl.constexpr,  # N <= BLOCK: reduce mean(u * x) here; else read MEAN_UX
):
    """dx for a tile of rows x columns, and the tile's dweight partial kept in registers.

    Persistent over rows: program (p, q) walks its rows in order, so the partial of row group p
    is a fixed-order sum, and the second pass (dweight_sum_kernel) sums the groups in order.
    """
    pid = tl.program_id(0).to(tl.int64)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    row_start = pid * rows_per_program  # int64, so every row offset below is int64 too
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    dw = tl.zeros([BLOCK], dtype=ACC)
    for row in range(row_start, row_end):
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(ACC)
        dy = tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0).to(ACC)
        rstd = tl.load(RSTD + row)
        if HAS_WEIGHT:
            # Re-read per row (an L1/L2 hit) instead of pinning BLOCK more registers.
            u = dy * (tl.load(W + cols, mask=mask, other=0.0).to(ACC) + offset)
        else:
            u = dy
        if ONE_TILE:
            mean_ux = tl.sum(u * x, axis=0) / N
        else:
            mean_ux = tl.load(MEAN_UX + row)
        dx = (u - x * (rstd * rstd * mean_ux)) * rstd
        if HAS_DH:
            dx += tl.load(DH + row * stride_dh + cols, mask=mask, other=0.0).to(ACC)
        tl.store(DX + row * N + cols, dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw += dy * x * rstd
    if HAS_WEIGHT:
        tl.store(DW_PARTIAL + pid * N + cols, dw, mask=mask)


@triton.jit
def dweight_sum_kernel(
    PARTIAL,  # pointer to the per-program partials (G, N), ACC dtype
    DW,  # pointer to the weight gradient (N,), weight dtype
    G,  # number of partial rows
    N,  # data width
    ACC: tl.constexpr,
    BLOCK_G: tl.constexpr,  # partial rows summed at once
    BLOCK_N: tl.constexpr,  # columns per program
):
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_G, BLOCK_N], dtype=ACC)
    for start in range(0, G, BLOCK_G):
        rows = start + tl.arange(0, BLOCK_G)
        mask = (rows[:, None] < G) & col_mask[None, :]
        ptrs = PARTIAL + rows[:, None].to(tl.int64) * N + cols[None, :]
        acc += tl.load(ptrs, mask=mask, other=0.0).to(ACC)
    tl.store(DW + cols, tl.sum(acc, axis=0).to(DW.dtype.element_ty), mask=col_mask)

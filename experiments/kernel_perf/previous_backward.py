"""The previous backward (as of commit 5ca8b54): tile kernel + a separate dweight sum launch.

Kept verbatim (kernels only) so tune.py can time it beside the current one-launch backward in the
same run. Not used by the package.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


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


def launch(dy, x, w, rstd, sm_count):
    """The previous launcher's one-tile path (N <= 16384), with its heuristics."""
    m, n = x.shape
    block = triton.next_power_of_2(n)
    per_sm = max(2, min(8, 8192 // block))
    groups = max(1, min(m, sm_count * per_sm))
    rpp = triton.cdiv(m, groups)
    groups = triton.cdiv(m, rpp)
    dx = torch.empty_like(x)
    partial = torch.empty((groups, n), device=x.device, dtype=torch.float32)
    rmsnorm_backward_kernel[(groups, 1)](
        dy,
        x,
        w,
        rstd,
        rstd,
        dy,
        dx,
        partial,
        dy.stride(0),
        x.stride(0),
        0,
        m,
        n,
        0.0,
        0.0,
        rpp,
        HAS_WEIGHT=True,
        HAS_DH=False,
        ACC=tl.float32,
        BLOCK=block,
        ONE_TILE=True,
        num_warps=max(4, min(32, block // 2048)),
    )
    dw = torch.empty((n,), device=x.device, dtype=w.dtype)
    dweight_sum_kernel[(triton.cdiv(n, 128),)](
        partial, dw, groups, n, ACC=tl.float32, BLOCK_G=32, BLOCK_N=128, num_warps=4
    )
    return dx, dw

"""The one-row forward with its loads issued up front, for tune.py part ``earlyw``.

The package's one-pass forward (``kernels.rmsnorm_forward_kernel``) loaded the weight after the
row's reduction and stored the inverse RMS last. Liger's kernel, 1-2% ahead of ours at 4096
columns (bench, 2026-12-01), issues the weight's load beside the row's, before the reduction,
and stores the inverse RMS before the output. This kernel is the package's plain case (weight,
no residual, no offset, not Llama's rounding) with that order, and optionally without masks
when the row fills the block (``EVEN``), so part ``earlyw`` could time the order alone. Its
figures moved the package's kernel to that order up to ``kernels.WEIGHT_FIRST_MAX_BLOCK``
columns; the copy stays, with the unmasked variant, for the timing that checks the package.

Same values as the package's kernel, bit for bit: same float32 math, same operations.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def early_weight_forward_kernel(
    X,  # (M, N) rows, row stride stride_x, unit column stride
    W,  # (N,) weight, contiguous
    Y,  # (M, N) output, contiguous
    RSTD,  # (M,) float32 inverse RMS
    stride_x,
    N,
    eps,
    BLOCK: tl.constexpr,
    EVEN: tl.constexpr,  # N == BLOCK: no masks
    EARLY: tl.constexpr,  # weight loaded before the reduction, RSTD stored before Y; else after
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    if EVEN:
        x = tl.load(X + row * stride_x + cols).to(tl.float32)
    else:
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if EARLY:
        if EVEN:
            w = tl.load(W + cols).to(tl.float32)
        else:
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    if EARLY:
        tl.store(RSTD + row, rstd)
    else:
        if EVEN:
            w = tl.load(W + cols).to(tl.float32)
        else:
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x * rstd * w).to(Y.dtype.element_ty)
    if EVEN:
        tl.store(Y + row * N + cols, y)
    else:
        tl.store(Y + row * N + cols, y, mask=mask)
    if not EARLY:
        tl.store(RSTD + row, rstd)


def launch(x: torch.Tensor, w: torch.Tensor, eps: float, warps: int, even: bool, early=True):
    """``x (M, N)`` unit column stride, ``w (N,)`` contiguous -> ``(y (M, N), rstd (M,))``.
    ``early=False``: the package's order before the change (weight after the reduction, the
    inverse RMS stored last), so one run can time both orders."""
    m, n = x.shape
    block = triton.next_power_of_2(n)
    if even and n != block:
        raise ValueError(f"even=True needs N a power of two (got N={n})")
    y = torch.empty_like(x)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    early_weight_forward_kernel[(m,)](
        x, w, y, rstd, x.stride(0), n, eps, BLOCK=block, EVEN=even, EARLY=early, num_warps=warps
    )
    return y, rstd


@triton.jit
def early_weight_rows_kernel(
    X,  # (M, N) rows, row stride stride_x, unit column stride
    W,  # (N,) weight, contiguous
    Y,  # (M, N) output, contiguous
    RSTD,  # (M,) float32 inverse RMS
    stride_x,
    M,
    N,
    eps,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,  # rows per program: a (ROWS, BLOCK) tile
    EARLY: tl.constexpr,  # weight loaded before the reduction; else after (the package's order)
):
    """The package's several-rows forward (``kernels.rmsnorm_forward_rows_kernel``, rows up to
    1024 wide) in its plain case, with the weight's load before or after the reduction."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if EARLY:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    if EARLY:
        tl.store(RSTD + rows, rstd, mask=row_mask)
    else:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    if not EARLY:
        tl.store(RSTD + rows, rstd, mask=row_mask)


def launch_rows(x: torch.Tensor, w: torch.Tensor, eps: float, rows: int, warps: int, early=True):
    """``x (M, N)`` with N <= 1024 and unit column stride, ``w (N,)`` contiguous, ``rows`` rows
    per program -> ``(y (M, N), rstd (M,))``."""
    m, n = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    block = triton.next_power_of_2(n)
    early_weight_rows_kernel[(triton.cdiv(m, rows),)](
        x, w, y, rstd, x.stride(0), m, n, eps, BLOCK=block, ROWS=rows, EARLY=early, num_warps=warps
    )
    return y, rstd

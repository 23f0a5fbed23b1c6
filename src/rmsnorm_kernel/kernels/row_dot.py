"""The tile backward's first launch for rows wider than one tile: each row's ``mean(u * x)``
(``u = dy * (offset + w)``), which dx needs before any of its column tiles can be written."""

from __future__ import annotations

import triton
import triton.language as tl

from .backward_parts import _dy_sum
from .common import _pdl_prologue


@triton.jit
def rmsnorm_row_dot_kernel(
    DY,  # pointer to the upstream gradient rows, row stride stride_dy, unit column stride
    X,  # pointer to the normalised input rows (x, or x + residual), row stride stride_x
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    MEAN_UX,  # pointer to the output mean(u * x) per row (M,), ACC dtype
    DY_B,  # pointers to dy's other parts (read only when DY_PARTS > 1, resp. 3)
    DY_C,
    stride_dy,
    stride_x,
    stride_w,  # elements between two values of W
    stride_dy_b,
    stride_dy_c,
    N,  # data width
    offset,  # u = dy * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    HAS_WEIGHT: tl.constexpr,
    DY_PARTS: tl.constexpr,  # dy = dy + dy_b (+ dy_c): 1, 2 or 3 parts
    DY_SUM: tl.constexpr,  # the sum's dtype (its one rounding)
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # chunk width
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """Wide rows, backward step 1 of 2: the one row-wide reduction dx needs, mean(u * x)."""
    _pdl_prologue(PDL)
    row = tl.program_id(0).to(tl.int64)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    cols = tl.arange(0, BLOCK)
    sum_ux = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, N, BLOCK):
        c = start + cols
        mask = c < N
        x = tl.load(X + row * stride_x + c, mask=mask, other=0.0).to(ACC)
        u = _dy_sum(
            tl.load(DY + row * stride_dy + c, mask=mask, other=0.0),
            DY_B + row * stride_dy_b + c,
            DY_C + row * stride_dy_c + c,
            mask,
            DY_PARTS,
            DY_SUM,
            ACC,
        )
        if HAS_WEIGHT:
            u = u * (tl.load(W + c * stride_w, mask=mask, other=0.0).to(ACC) + offset)
        sum_ux += u * x
    tl.store(MEAN_UX + row, tl.sum(sum_ux, axis=0) / N)

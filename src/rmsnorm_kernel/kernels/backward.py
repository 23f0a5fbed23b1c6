"""The tile backward: program ``(p, q)`` walks the rows of row group ``p`` over column tile
``q``, writes their dx, and finishes dweight in the same launch (a fixed tree over the groups'
partials) or leaves its partial to :func:`~.dweight_sum.dweight_sum_kernel`. A row wider than
one tile takes its ``mean(u * x)`` from :mod:`.row_dot`'s first launch (x and dy are then read
twice)."""

from __future__ import annotations

import triton
import triton.language as tl

from .backward_parts import _dw_term, _dweight_finish, _row_backward
from .common import _pdl_prologue


@triton.jit(do_not_specialize=["M", "rows_per_program"])
def rmsnorm_backward_kernel(
    DY,  # pointer to the upstream gradient rows, row stride stride_dy, unit column stride
    X,  # pointer to the normalised input rows (x, or x + residual), row stride stride_x
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    RSTD,  # pointer to the inverse RMS per row saved by the forward pass (M,)
    MEAN_UX,  # pointer to mean(u * x) per row (M,) from rmsnorm_row_dot_kernel (when not ONE_TILE)
    DH,  # pointer to the gradient of the returned x + residual (read only when HAS_DH)
    DY_B,  # pointers to dy's other parts (read only when DY_PARTS > 1, resp. 3)
    DY_C,
    DX,  # pointer to the input gradient (M, N), contiguous
    DX2,  # pointer to a second copy of dx in another dtype (M, N), contiguous (when HAS_DX2)
    DW,  # pointer to the weight gradient (N,), weight dtype (written only when HAS_WEIGHT)
    DW_PARTIAL,  # pointer to the per-row-group dweight partials (groups, N): float64 with
    #              TREE, else DW_ACC
    COUNTERS,  # pointer to int32 tree counters (tiles, groups), zero on entry and on exit
    stride_dy,  # elements between two rows of DY
    stride_x,  # elements between two rows of X
    stride_dh,  # elements between two rows of DH
    stride_w,  # elements between two values of W
    stride_dy_b,
    stride_dy_c,
    M,  # number of rows
    N,  # data width
    rows_per_program,  # program (p, q) owns rows [p * rows_per_program, (p + 1) * rows_per_program)
    offset,  # u = dy * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    DY_PARTS: tl.constexpr,  # dy = dy + dy_b (+ dy_c): 1, 2 or 3 parts (_dy_sum)
    DY_SUM: tl.constexpr,  # the sum's dtype (its one rounding)
    HAS_DX2: tl.constexpr,  # also store dx in DX2's dtype (the Inductor pass's dx cast)
    LLAMA: tl.constexpr,  # the forward rounded x * r to X's dtype: dweight sums dy * that value
    ACC: tl.constexpr,
    DW_ACC: tl.constexpr,  # dweight accumulation dtype over this program's rows (registers)
    BLOCK: tl.constexpr,  # columns per program: the whole row when ONE_TILE
    ONE_TILE: tl.constexpr,  # N <= BLOCK: reduce mean(u * x) here; else read MEAN_UX
    STAGES: tl.constexpr,  # software pipelining depth of the row loop (loads of later rows early)
    TREE: tl.constexpr,  # finish dweight here (fixed tree); else only store the partial
    FANOUT: tl.constexpr,  # children per node of that tree
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """dx for a tile of rows x columns, and dweight for the whole tensor, in one launch.

    Persistent over rows: program (p, q) walks its rows in order, so the partial of row group p is
    a fixed-order sum; the partials of all groups are then summed over a fixed tree
    (``_dweight_tree_finish``) by whichever programs finish last.
    """
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    groups = tl.num_programs(0)
    tile = tl.program_id(1)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    row_start = pid.to(tl.int64) * rows_per_program  # int64: every row offset below is int64 too
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tile * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    dw = tl.zeros([BLOCK], dtype=DW_ACC)
    for row in tl.range(row_start, row_end, num_stages=STAGES):
        dy, x, rstd = _row_backward(
            DY,
            X,
            W,
            RSTD,
            MEAN_UX,
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
            ONE_TILE,
        )
        if HAS_WEIGHT:
            dw += _dw_term(dy, x, rstd, LLAMA, X.dtype.element_ty, DW_ACC)
    if HAS_WEIGHT:
        _dweight_finish(
            dw, DW, DW_PARTIAL, COUNTERS + tile * groups, pid, groups, N, cols, mask, TREE, FANOUT
        )

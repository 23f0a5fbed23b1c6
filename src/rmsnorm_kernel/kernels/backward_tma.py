"""The short-row backward with its x / dy loads and dx stores through tensor descriptors (TMA,
Hopper): one bulk asynchronous copy a tile."""

from __future__ import annotations

import triton
import triton.language as tl

from .backward_parts import _dw_term, _dweight_finish, _dx, _dy_sum
from .common import _pdl_prologue


@triton.jit(do_not_specialize=["M", "rows_per_program"])
def rmsnorm_backward_tma_kernel(
    DY_DESC,  # tensor descriptor of dy viewed as (M, CHUNKS, CHUNK), box (ROWS, CHUNKS, CHUNK)
    X_DESC,  # the same for x (or x + residual)
    DX_DESC,  # the same for dx (contiguous, dx's dtype)
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    RSTD,  # pointer to the inverse RMS per row saved by the forward pass (M,)
    DH,  # pointer to the gradient of the returned x + residual (read only when HAS_DH)
    DY_B,  # pointers to dy's other parts (read only when DY_PARTS > 1, resp. 3)
    DY_C,
    DX2,  # pointer to a second copy of dx in another dtype (M, N), contiguous (when HAS_DX2)
    DW,  # pointer to the weight gradient (N,), as in the row kernel
    DW_PARTIAL,  # pointer to the per-program dweight partials (groups, N), as in the row kernel
    COUNTERS,  # pointer to int32 tree counters (groups,), zero on entry and on exit
    stride_dh,
    stride_w,  # elements between two values of W
    stride_dy_b,
    stride_dy_c,
    M,  # number of rows
    N,  # data width, == BLOCK
    rows_per_program,  # a multiple of ROWS: a tile never straddles two programs
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
    BLOCK: tl.constexpr,  # == N, a power of two (= CHUNKS * CHUNK)
    CHUNKS: tl.constexpr,
    CHUNK: tl.constexpr,  # min(N, 256): a descriptor's box is at most 256 values per dimension
    ROWS: tl.constexpr,  # rows per step: a (ROWS, BLOCK) tile
    STAGES: tl.constexpr,  # software pipelining depth of the step loop
    TREE: tl.constexpr,
    FANOUT: tl.constexpr,
    STRIDED: tl.constexpr,  # row tiles pid, pid + groups, ... (else one block of tiles each)
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """:func:`rmsnorm_backward_rows_kernel` with its x / dy loads and dx stores through tensor
    descriptors: on Hopper each tile is one bulk asynchronous copy (TMA) issued by one thread,
    instead of one ``cp.async`` per 16 bytes per thread, which frees issue slots and registers
    for the math of short rows. A row tile past M is read as zeros and its store is clipped.

    Program ``pid`` takes the ``rows_per_program / ROWS`` consecutive row tiles from
    ``pid * rows_per_program``, or with ``STRIDED`` the tiles ``pid, pid + groups, ...``: the
    programs then read x and dy side by side instead of ``groups`` places far apart
    (``config.BWD_TMA_STRIDED``). Either way each program adds its own rows in one fixed order.

    Row coordinates are int32 (a descriptor's); M < 2**31 rows, whatever M * N.
    """
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    groups = tl.num_programs(0)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    tiles = tl.cdiv(M, ROWS)
    if STRIDED:
        start, end, step = pid, tiles, groups
    else:
        start = pid * (rows_per_program // ROWS)
        end, step = tl.minimum(start + rows_per_program // ROWS, tiles), 1
    cols = tl.arange(0, BLOCK)
    if HAS_WEIGHT:
        w = tl.load(W + cols * stride_w).to(ACC) + offset
    dw = tl.zeros([ROWS, BLOCK], dtype=DW_ACC)
    for tile in tl.range(start, end, step, num_stages=STAGES):
        first = tile * ROWS
        rows = first + tl.arange(0, ROWS)
        row_mask = rows < M  # a program's tiles end at a multiple of ROWS or at M
        x_raw = tl.reshape(X_DESC.load([first, 0, 0]), [ROWS, BLOCK])
        x = x_raw.to(ACC)
        rows64 = rows[:, None].to(tl.int64)
        dy = _dy_sum(
            tl.reshape(DY_DESC.load([first, 0, 0]), [ROWS, BLOCK]),
            DY_B + rows64 * stride_dy_b + cols[None, :],
            DY_C + rows64 * stride_dy_c + cols[None, :],
            row_mask[:, None],
            DY_PARTS,
            DY_SUM,
            ACC,
        )
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)[:, None]  # past M: 0
        if HAS_WEIGHT:
            u = dy * w[None, :]
        else:
            u = dy
        mean_ux = (tl.sum(u * x, axis=1) / N)[:, None]
        dx = _dx(u, x, rstd, mean_ux)
        if HAS_DH:
            dh_ptrs = DH + rows64 * stride_dh + cols[None, :]
            dx += tl.load(dh_ptrs, mask=row_mask[:, None], other=0.0).to(ACC)
        DX_DESC.store([first, 0, 0], tl.reshape(dx.to(DX_DESC.dtype), [ROWS, CHUNKS, CHUNK]))
        if HAS_DX2:
            dx2_ptrs = DX2 + rows64 * N + cols[None, :]
            tl.store(dx2_ptrs, dx.to(DX2.dtype.element_ty), mask=row_mask[:, None])
        if HAS_WEIGHT:
            dw += _dw_term(dy, x, rstd, LLAMA, x_raw.dtype, DW_ACC)  # rows past M add 0
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
            cols < N,
            TREE,
            FANOUT,
        )

"""The cluster backward for wide rows in one pass: each row over the CTAs of a thread-block
cluster (Hopper, Triton >= 3.8), ``u . x`` met at the cluster's barrier, so x and dy are read
from DRAM once."""

from __future__ import annotations

import triton
import triton.language as tl

from .backward_parts import _dw_term, _dx, _dy_sum
from .common import _CLUSTER_BARRIER, _pdl_prologue, _widened


@triton.jit(do_not_specialize=["M", "rows_per_program"])
def rmsnorm_backward_cluster_kernel(
    DY, X, W, RSTD, DH, DY_B, DY_C, DX, DX2,  # as rmsnorm_backward_kernel's
    DW_PARTIAL,  # (groups, N) DW_ACC: each group's dweight partial (the sum launch finishes)
    PART,  # (M, C_POW2) ACC scratch: each row's partial sums of u * x, one per CTA
    stride_dy, stride_x, stride_dh, stride_w, stride_dy_b, stride_dy_c,
    M, N, rows_per_program, offset, offset_lo,
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    DY_PARTS: tl.constexpr,
    DY_SUM: tl.constexpr,
    HAS_DX2: tl.constexpr,
    LLAMA: tl.constexpr,
    ACC: tl.constexpr,
    DW_ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # columns per CTA (a power of two), C * BLOCK >= N
    C: tl.constexpr,  # CTAs per row: one hardware thread-block cluster (BackwardConfig.cluster)
    C_POW2: tl.constexpr,  # C rounded up to a power of two (the partials' row stride)
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
    PREFETCH: tl.constexpr = False,  # BackwardConfig.prefetch (a hint: no value changes)
):  # fmt: skip
    """Wide rows in one pass: each row split over the C CTAs of one thread-block cluster, as the
    cluster forward splits it (``CachedKernel(..., cluster=True)`` makes the clusters, so a
    row's CTAs are co-resident by construction). Cluster ``g`` walks rows ``g *
    rows_per_program ...`` in order; CTA ``pid % C`` of it holds column chunk ``pid % C`` of x
    and dy in registers, stores its chunk's sum of u * x, meets its partners at the cluster
    barrier, and sums the row's C partials from L2 in chunk order (every CTA the same total), so
    x and dy are read from DRAM once instead of twice (the row-dot launch, then the column
    tiles). Its chunk's dweight partial stays in registers over the walk and is stored once, for
    the fixed-order sum launch. Through the interpreter (no clusters): C = 1 only."""
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    group = pid // C
    chunk = pid % C
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    row_start = group.to(tl.int64) * rows_per_program  # int64: every row offset is int64 too
    row_end = tl.minimum(row_start + rows_per_program, M)
    # A scalar base plus a constant range (the cluster forward's addressing: fewer registers).
    start = chunk * BLOCK
    cols = tl.arange(0, BLOCK)
    mask = cols < N - start
    dw = tl.zeros([BLOCK], dtype=DW_ACC)
    # PREFETCH (dy in one part only): the next row's x and dy are loaded before the meeting, so
    # their DRAM reads overlap the wait for the cluster's slowest CTA.
    AHEAD: tl.constexpr = PREFETCH and DY_PARTS == 1
    if AHEAD:
        x_next = tl.load(X + row_start * stride_x + start + cols, mask=mask, other=0.0)
        dy_next = tl.load(DY + row_start * stride_dy + start + cols, mask=mask, other=0.0)
    for row in range(row_start, row_end):
        # x and dy stay in their own dtype over the meeting (16-bit: half the registers) and are
        # widened on each side of it, after it from their bits (exact, the same values; a cast
        # the compiler would keep live from before the barrier instead).
        if AHEAD:
            x = x_next
            dy = dy_next
        else:
            x = tl.load(X + row * stride_x + start + cols, mask=mask, other=0.0)
            dy = tl.load(DY + row * stride_dy + start + cols, mask=mask, other=0.0)
            if DY_PARTS > 1:
                dy = _dy_sum(
                    dy,
                    DY_B + row * stride_dy_b + start + cols,
                    DY_C + row * stride_dy_c + start + cols,
                    mask,
                    DY_PARTS,
                    DY_SUM,
                    ACC,
                )
        rstd = tl.load(RSTD + row)
        u = dy.to(ACC)
        if HAS_WEIGHT:
            # Re-read on each side of the meeting (L1/L2 hits) instead of pinning BLOCK more
            # registers over it.
            u = u * (tl.load(W + (start + cols) * stride_w, mask=mask, other=0.0).to(ACC) + offset)
        total = tl.sum(u * x.to(ACC), axis=0)
        if AHEAD:
            # (the row's own mask, or none past the cluster's last row; a where, not an and
            # with the scalar test, which Triton's interpreter refuses as a mask)
            ahead = cols < tl.where(row + 1 < row_end, N - start, 0)
            x_next = tl.load(X + (row + 1) * stride_x + start + cols, mask=ahead, other=0.0)
            dy_next = tl.load(DY + (row + 1) * stride_dy + start + cols, mask=ahead, other=0.0)
        if C > 1:
            tl.store(PART + row * C_POW2 + chunk, total)
            tl.inline_asm_elementwise(
                _CLUSTER_BARRIER, "=r", [], dtype=tl.int32, is_pure=False, pack=1
            )
            k = tl.arange(0, C_POW2)
            parts = tl.load(PART + row * C_POW2 + k, mask=k < C, other=0.0, cache_modifier=".cg")
            total = tl.sum(parts, axis=0)
        xf = _widened(x, ACC)
        dyf = _widened(dy, ACC)
        u = dyf
        if HAS_WEIGHT:
            u = u * (tl.load(W + (start + cols) * stride_w, mask=mask, other=0.0).to(ACC) + offset)
        dx = _dx(u, xf, rstd, total / N)
        if HAS_DH:
            dx += tl.load(DH + row * stride_dh + start + cols, mask=mask, other=0.0).to(ACC)
        tl.store(DX + row * N + start + cols, dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_DX2:
            tl.store(DX2 + row * N + start + cols, dx.to(DX2.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw += _dw_term(dyf, xf, rstd, LLAMA, X.dtype.element_ty, DW_ACC)
    if HAS_WEIGHT:
        # (as _dweight_finish's sum finish: DW_ACC partials, widened exactly by the sum launch)
        tl.store(
            DW_PARTIAL + group.to(tl.int64) * N + start + cols,
            dw.to(DW_PARTIAL.dtype.element_ty),
            mask=mask,
        )

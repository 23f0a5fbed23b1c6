"""The cluster forward: one row over the CTAs of a thread-block cluster (Hopper, Triton >= 3.8),
the partial sums of squares met at the cluster's barrier and added in CTA order."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import _CLUSTER_BARRIER, _row_load, _row_store, _widen_by_bits, _widen_exact


@triton.jit
def rmsnorm_forward_cluster_kernel(
    X, RES, W, Y, H, RSTD,  # as rmsnorm_forward_kernel's
    PART,  # (M, C_POW2) ACC scratch: each row's partial sums of squares, one per CTA
    stride_x, stride_res, stride_w, N, eps, eps_lo, offset, offset_lo,
    HAS_WEIGHT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    LLAMA: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # columns per CTA (a power of two), C * BLOCK >= N
    C: tl.constexpr,  # CTAs per row: one hardware thread-block cluster (ForwardConfig.cluster)
    C_POW2: tl.constexpr,  # C rounded up to a power of two (the partials' row stride)
    HAS_OFFSET: tl.constexpr,
    STORE_RSTD: tl.constexpr,
    EVEN: tl.constexpr,  # N == C * BLOCK: loads and stores without masks (fewer registers)
    WIDEN_CVT: tl.constexpr,  # fp16 output widened by _widen_exact (uncapped launches), else bits
):  # fmt: skip
    """Each row over the C CTAs of one thread-block cluster (``ForwardConfig.cluster``): CTA
    ``pid`` holds chunk ``pid % C`` of row ``pid // C`` in registers, so x is read from DRAM
    once where one program's registers cannot hold a row. The launch makes the clusters
    (``CachedKernel(..., cluster=True)``: CTAs ``C*r .. C*r + C - 1`` are one cluster, which the
    hardware schedules all at once), so the C CTAs of a row are co-resident by construction: no
    persistent grid, counter or spin, one cluster barrier a row. Each CTA stores its chunk's sum
    of squares, meets its partners, then reads the row's C partials from L2 (``.cg``: a line of
    partials may be stale in this SM's L1) and sums them in chunk order, so every CTA computes
    the same rstd, with the bits of the split-row kernel of the same block and warps.

    16-bit chunks stay 16-bit in registers and are widened twice (a cast for the sum, then for
    the output :func:`_widen_exact` with WIDEN_CVT, else :func:`_widen_by_bits`: under a register
    cap the conversion spills more), as the packed one-row pass; the weight is loaded
    after the barrier, so it is not held through the wait. Through the interpreter (no
    clusters): C = 1 only."""
    pid = tl.program_id(0)
    row = tl.cast(pid // C, tl.int64)
    chunk = pid % C
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    # A scalar base plus a constant range: offsets the compiler folds into the addresses (a
    # runtime chunk * BLOCK + arange costs registers, which spilled at 32 warps).
    start = chunk * BLOCK
    cols = tl.arange(0, BLOCK)
    mask = cols < N - start
    x16 = _row_load(X + row * stride_x + start + cols, mask, EVEN, "")
    if HAS_RESIDUAL:
        res = _row_load(RES + row * stride_res + start + cols, mask, EVEN, "")
        x16 = (x16.to(ACC) + res.to(ACC)).to(H.dtype.element_ty)
        _row_store(H + row * N + start + cols, x16, mask, EVEN)
    xf = x16.to(ACC)
    total = tl.sum(xf * xf, axis=0)
    if C > 1:
        tl.store(PART + row * C_POW2 + chunk, total)
        tl.inline_asm_elementwise(_CLUSTER_BARRIER, "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        k = tl.arange(0, C_POW2)
        parts = tl.load(PART + row * C_POW2 + k, mask=k < C, other=0.0, cache_modifier=".cg")
        total = tl.sum(parts, axis=0)
    rstd = 1.0 / tl.sqrt(total / N + eps)
    if X.dtype.element_ty == tl.float16 or X.dtype.element_ty == tl.bfloat16:
        if WIDEN_CVT:
            y = _widen_exact(x16) * rstd  # the cast's values: fp16 by cvt, bf16 from the bits
        else:
            y = _widen_by_bits(x16) * rstd  # the cast's values, from the bits
    else:
        y = x16.to(ACC) * rstd
    if LLAMA:
        y = y.to(X.dtype.element_ty).to(ACC)
    if HAS_WEIGHT:
        w = _row_load(W + start * stride_w + cols * stride_w, mask, EVEN, "").to(ACC)
        if HAS_OFFSET:
            y = y * (w + offset)
        else:
            y = y * w
    _row_store(Y + row * N + start + cols, y.to(Y.dtype.element_ty), mask, EVEN)
    if STORE_RSTD:
        tl.store(RSTD + row, rstd, mask=chunk == 0)

"""The forward with one row per program (any width: one pass over a register block, or a
chunked pass for rows wider than it) and with several short rows per program.

Shapes: x, residual, y, h ``(M, N)`` (row strides as given, unit column stride; y and h
contiguous), weight ``(N,)`` (any stride), rstd ``(M,)`` float32 (float64 for float64 outputs)."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import _pdl_prologue, _row_load, _row_store, _widen_exact

#: The one-pass forward loads the weight beside the row, before the reduction, for row blocks up
#: to this. Measured on a copy of this kernel with that order (experiments/kernel_perf/
#: early_weight_forward.py; graph replay, H200, tune.py part earlyw, 2026-12-01): 0.5-2.0%
#: faster from 2048 to 8192 columns (e.g. 16384 x 4096 bf16 66.4 us vs 67.2, fp16 66.7 vs 68.1),
#: 0.8% slower at 16384 (133.1 vs 132.0), so wider blocks load it after the reduction. The inverse
#: RMS is stored before the output with the weight-first order only: at 16384 columns the weight
#: after the reduction with the inverse RMS stored first took 148.8 us at 8192 rows against 132.2
#: with it stored last (tune.py part earlyw, thirteenth session, 2026-12-01). 0 would restore the
#: old order everywhere.
WEIGHT_FIRST_MAX_BLOCK = tl.constexpr(8192)


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
    stride_w,  # elements between two values of W (weights can be views: a step slice, expand)
    N,  # data width: the number of values in a row
    eps,  # added to the mean of squares; float32 high part ...
    eps_lo,  # ... and low part (Triton passes Python floats as float32; fp64 needs both)
    offset,  # y = x * r * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    HAS_WEIGHT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    LLAMA: tl.constexpr,  # round x * r to X's dtype before the weight (Llama's two roundings)
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK: tl.constexpr,  # work width: columns handled at once (a power of two)
    ONE_PASS: tl.constexpr,  # N <= BLOCK: the whole row stays in registers
    PACKED: tl.constexpr,  # ONE_PASS, 16-bit rows: keep the row 16-bit, widen it by its bits
    UNMASKED: tl.constexpr,  # ONE_PASS and N == BLOCK: loads and stores without masks
    HAS_OFFSET: tl.constexpr,  # offset != 0 (else y = x * r * w, with no add)
    X_EVICT: tl.constexpr,  # the row's (first) load: "" or "evict_last" (EVICT_LAST_ROW_BYTES)
    STORE_RSTD: tl.constexpr,  # False: nothing will differentiate (inference), RSTD is unused
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
    STREAM: tl.constexpr = False,  # chunked rows: pass 2 loads evict_first, stores y streaming
    STAGES: tl.constexpr = 1,  # chunked rows: software pipelining of pass 2 (1: none)
):
    """One row per program; rows wider than BLOCK are walked in chunks (the second pass re-reads
    the row, mostly from L2). ``STREAM`` (ForwardConfig.stream) marks what pass 2 reads and
    writes as used once (cache hints only, no value changes), so that y does not push rows
    still waiting for their second pass out of L2.

    ``PACKED`` (see config.PACKED_FORWARD): the row is kept in registers in its 16-bit dtype, two
    values per register, and widened twice: by a cast for the sum of squares and through its
    bits for the output (``_widen_by_bits``). Two different expressions, so the
    compiler does not keep one float32 copy of the row live across the reduction; the values are
    the same bits either way."""
    _pdl_prologue(PDL)
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
        x16 = _row_load(x_row + cols, mask, UNMASKED, X_EVICT)  # X's dtype
        x = x16.to(ACC)
        if HAS_WEIGHT and BLOCK <= WEIGHT_FIRST_MAX_BLOCK:
            # Issued with the row's load: its latency hides behind the reduction.
            w = _row_load(W + cols * stride_w, mask, UNMASKED, "")
        else:
            w = tl.zeros([BLOCK], dtype=W.dtype.element_ty)  # unused: loaded below, or no weight
        if HAS_RESIDUAL:
            res = _row_load(res_row + cols, mask, UNMASKED, "").to(ACC)
            x16 = (x + res).to(H.dtype.element_ty)
            _row_store(h_row + cols, x16, mask, UNMASKED)
            x = x16.to(ACC)  # normalise the rounded sum the caller receives
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        if STORE_RSTD and BLOCK <= WEIGHT_FIRST_MAX_BLOCK:
            tl.store(RSTD + row, rstd)  # before the output, with the weight-first order
        if PACKED:
            x = _widen_exact(x16)  # the same values as the cast, from the 16-bit row
        y = x * rstd
        if LLAMA:
            y = y.to(X.dtype.element_ty).to(ACC)
        if HAS_WEIGHT:
            if BLOCK > WEIGHT_FIRST_MAX_BLOCK:
                w = _row_load(W + cols * stride_w, mask, UNMASKED, "")
            if HAS_OFFSET:
                y = y * (w.to(ACC) + offset)
            else:  # the add alone costs the packed pass its spill-free registers
                y = y * w.to(ACC)
        _row_store(y_row + cols, y.to(Y.dtype.element_ty), mask, UNMASKED)
        if STORE_RSTD and BLOCK > WEIGHT_FIRST_MAX_BLOCK:
            tl.store(RSTD + row, rstd)
    else:
        # Pass 1: sum of squares, chunk by chunk (and write x + residual on the way).
        sum_sq = tl.zeros([BLOCK], dtype=ACC)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = c < N
            x = tl.load(x_row + c, mask=mask, other=0.0, eviction_policy=X_EVICT).to(ACC)
            if HAS_RESIDUAL:
                h = (x + tl.load(res_row + c, mask=mask, other=0.0).to(ACC)).to(H.dtype.element_ty)
                tl.store(h_row + c, h, mask=mask)
                x = h.to(ACC)
            sum_sq += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(sum_sq, axis=0) / N + eps)
        # Pass 2: scale and store (pipelined over STAGES chunks: ForwardConfig.stages).
        for start in tl.range(0, N, BLOCK, num_stages=STAGES):
            c = start + cols
            mask = c < N
            if HAS_RESIDUAL:
                src = h_row + c
            else:
                src = x_row + c
            if STREAM:
                x = tl.load(src, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC)
            else:
                x = tl.load(src, mask=mask, other=0.0).to(ACC)
            y = x * rstd
            if LLAMA:
                y = y.to(X.dtype.element_ty).to(ACC)
            if HAS_WEIGHT:
                w = tl.load(W + c * stride_w, mask=mask, other=0.0).to(ACC)
                if HAS_OFFSET:
                    w += offset
                y = y * w
            if STREAM:
                tl.store(y_row + c, y.to(Y.dtype.element_ty), mask=mask, cache_modifier=".cs")
            else:
                tl.store(y_row + c, y.to(Y.dtype.element_ty), mask=mask)
        if STORE_RSTD:
            tl.store(RSTD + row, rstd)


#: M only bounds the last tile: not worth a compiled variant per M % 16.
@triton.jit(do_not_specialize=["M"])
def rmsnorm_forward_rows_kernel(
    X,  # pointer to the input rows, row stride stride_x, unit column stride
    RES,  # pointer to the residual rows (read only when HAS_RESIDUAL)
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    Y,  # pointer to the output (M, N), contiguous
    H,  # pointer to the output x + residual (M, N), contiguous (written only when HAS_RESIDUAL)
    RSTD,  # pointer to the inverse RMS per row (M,), ACC dtype
    stride_x,
    stride_res,
    stride_w,  # elements between two values of W
    M,  # number of rows
    N,  # data width
    eps,
    eps_lo,
    offset,
    offset_lo,
    HAS_WEIGHT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    LLAMA: tl.constexpr,  # round x * r to X's dtype before the weight
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # >= N, a power of two
    ROWS: tl.constexpr,  # rows per program: a (ROWS, BLOCK) tile
    X_EVICT: tl.constexpr,  # the rows' load: "" or "evict_last" (config.EVICT_LAST_ROW_BYTES)
    STORE_RSTD: tl.constexpr,  # False: inference, RSTD is unused
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """Short rows (N <= BLOCK): ROWS rows per program, so each program moves enough bytes to hide
    its launch and reduction latency, and the weight is loaded once per ROWS rows."""
    _pdl_prologue(PDL)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    cols = tl.arange(0, BLOCK)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]
    x_ptrs = X + rows[:, None] * stride_x + cols[None, :]
    x = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy=X_EVICT).to(ACC)
    if HAS_RESIDUAL:
        res = tl.load(RES + rows[:, None] * stride_res + cols[None, :], mask=mask, other=0.0)
        h = (x + res.to(ACC)).to(H.dtype.element_ty)
        tl.store(H + rows[:, None] * N + cols[None, :], h, mask=mask)
        x = h.to(ACC)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * rstd[:, None]
    if LLAMA:
        y = y.to(X.dtype.element_ty).to(ACC)
    if HAS_WEIGHT:
        w = tl.load(W + cols * stride_w, mask=col_mask, other=0.0).to(ACC) + offset
        y = y * w[None, :]
    tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    if STORE_RSTD:
        tl.store(RSTD + rows, rstd, mask=row_mask)

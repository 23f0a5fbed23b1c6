"""An experiment (39th session, not in the package): the split-row forward with wide chunks and
no weight held across the walk, to reach the one-row kernel's rate at 65536 columns (H200: 70.1
us at 1024 x 65536 bf16, 3.8 TB/s; the split kernel 98.5 at 512 x 131072, the same bytes).

``wide_split_kernel`` has the staged split kernel's signature, so split_tune.py swaps it in for
``ops.FORWARD_SPLIT_STAGED`` under a ``ForwardConfig(split=C, stages=S)`` (S >= 2). Per step:
load the chunk (16-bit rows kept packed, as the one-row kernel's PACKED), publish its sum of
squares, wait for the row's C partials, widen the chunk by its bits, load the weight (from L2,
late: holding it across the walk is what spills a 64-element-a-thread chunk at 32 warps), scale,
store. The loop is pipelined by ``tl.range(num_stages=S - 1)``: S = 2, none. The weight's address
carries ``row * stride_res`` (0 at run time without a residual, which this kernel does not
support) so that the compiler cannot hoist the load out of the loop. Same tasks, counters and
order of additions as the package's split kernels, so the same bits; no residual, no offset, no
Llama rounding, no float64 (callers must not pass them)."""

from __future__ import annotations

import triton
import triton.language as tl

from rmsnorm_kernel import kernels


@triton.jit(do_not_specialize=["M"])
def wide_split_kernel(
    X, RES, W, Y, H, RSTD, PART, COUNT,
    stride_x, stride_res, stride_w, M, N, eps, eps_lo, offset, offset_lo,
    HAS_WEIGHT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    LLAMA: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
    C: tl.constexpr,
    C_POW2: tl.constexpr,
    HAS_OFFSET: tl.constexpr,
    STORE_RSTD: tl.constexpr,
    STAGES: tl.constexpr,
    SPIN_ASM: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)
    chunk = pid % C
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    for t in tl.range(pid, M * C, g, num_stages=STAGES - 1):
        row = tl.cast(t // C, tl.int64)
        x16 = tl.load(X + row * stride_x + cols, mask=mask, other=0.0)
        xf = x16.to(ACC)
        tl.store(PART + row * C_POW2 + chunk, tl.sum(xf * xf, axis=0))
        if not SPIN_ASM:
            tl.debug_barrier()
        seen = tl.atomic_add(COUNT + row, 1, sem="release", scope="gpu")
        parts = kernels._split_parts(
            PART, COUNT, row, seen - seen % C + C, C, C_POW2, ACC, SPIN_ASM
        )
        rstd = 1.0 / tl.sqrt(tl.sum(parts, axis=0) / N + eps)
        if X.dtype.element_ty == tl.float32:
            y = x16 * rstd
        else:
            y = kernels._widen_by_bits(x16) * rstd
        if HAS_WEIGHT:
            w = tl.load(W + cols * stride_w + row * stride_res, mask=mask, other=0.0)
            y = y * w.to(ACC)
        tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=mask)
        if STORE_RSTD:
            tl.store(RSTD + row, rstd, mask=chunk == 0)

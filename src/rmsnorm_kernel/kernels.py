"""The Triton kernels, and nothing else: forward (one row or several rows per program, or one
row over several programs of a cooperative launch or over the CTAs of a thread-block cluster),
backward (dx, and dweight finished in the same launch or by a second, fixed-order sum launch),
and the row reduction that wide backward rows need first.

Math for one row of ``N`` values (``ACC`` is float32, or float64 for float64 outputs)::

    r  = 1 / sqrt(sum(x*x) / N + eps)       # divide by N, the data width -- never by BLOCK
    y  = x * r * (offset + w)
    u  = dy * (offset + w)
    dx = (u - x * r*r * sum(u*x) / N) * r  (+ dh, the gradient of the returned x + residual)
    dw = sum over rows of dy * x * r        # per-program partials, then a fixed float64 sum

Every program follows the tutorial's rhythm: program id -> column offsets -> mask -> pointers ->
load as ACC -> reduce -> store. Row offsets are int64 so tensors over 2**31 elements are addressed
correctly.

Determinism: the only atomics are integer counters that decide WHICH program adds two dweight
partials (or, in the split-row forward, when a row's partial sums of squares are all there),
never the ORDER of float additions. The partials are summed over a fixed tree (a
node adds its children's slots in index order, whichever child arrives last to do it, so who
adds gives the same bits) or, in the second launch, column by column in row order; either way
dweight is bitwise reproducible whatever the scheduling.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from . import backend  # (first: sets TRITON_INTERPRET before @triton.jit runs)

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
def _pdl_prologue(PDL: tl.constexpr):
    """With ``PDL`` (a launch with programmatic dependent launch, Hopper and newer): wait until
    the grid before this one in the stream has finished and its writes are visible, before this
    program touches memory; then let the grid after this one start launching (it waits the
    same way). Without it, nothing: the branch is compiled out."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def _row_load(ptrs, mask, UNMASKED: tl.constexpr, EVICT: tl.constexpr):
    """A row's values (0 where masked off); ``UNMASKED``: every lane is in the row; ``EVICT``:
    the load's eviction policy ("" or "evict_last": a cache hint, no value changes; passed at
    every call: Triton 3.6 does not compile a defaulted constexpr parameter of a helper)."""
    if UNMASKED:
        v = tl.load(ptrs, eviction_policy=EVICT)
    else:
        v = tl.load(ptrs, mask=mask, other=0.0, eviction_policy=EVICT)
    return v


@triton.jit
def _row_store(ptrs, v, mask, UNMASKED: tl.constexpr):
    if UNMASKED:
        tl.store(ptrs, v)
    else:
        tl.store(ptrs, v, mask=mask)


#: float16 -> float32 in :func:`_widen_exact` through the hardware conversion (``cvt.f32.f16``,
#: one instruction, as inline PTX: opaque, so the compiler cannot merge it with another cast of
#: the same values) instead of rebuilding the float32 from the bits (about eight integer
#: instructions a value; the fp16 cluster backward 2048 x 32768 on an H100 177.4 us against
#: 222.0, experiments/kernel_perf/widen_ab.py). NVIDIA compiled kernels only: the interpreter
#: and ROCm run no PTX.
FP16_WIDEN_CVT = tl.constexpr(backend.BACKEND == "cuda" and torch.version.hip is None)


@triton.jit
def _widen_by_bits(v):
    """A 16-bit float tensor -> float32 exactly, computed from its bits (not a cast, which the
    compiler would merge with the reduction's cast). bfloat16 is float32's top half: a 16-bit
    shift. float16: sign, exponent and mantissa moved into float32's fields, then scaled by
    2**112 (the exponent biases' difference; exact for normals and subnormals alike), with inf
    and NaN (exponent all ones) rebuilt directly."""
    bits = v.to(tl.uint16, bitcast=True).to(tl.uint32)
    if v.dtype == tl.bfloat16:
        wide = (bits << 16).to(tl.float32, bitcast=True)
    else:
        sign = (bits & 0x8000) << 16
        body = (bits & 0x7FFF) << 13
        scaled = body.to(tl.float32, bitcast=True) * 5.192296858534828e33  # 2**112
        special = (body | 0x7F800000).to(tl.float32, bitcast=True)  # inf, or NaN's payload
        magnitude = tl.where((bits & 0x7C00) == 0x7C00, special, scaled)
        wide = (magnitude.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return wide


@triton.jit
def _widen_exact(v):
    """:func:`_widen_by_bits`'s values, float16 through ``cvt.f32.f16`` where FP16_WIDEN_CVT
    (the packed one-row pass, the cluster backward, the uncapped cluster forward: measured
    there). The cluster forward under a register cap keeps the bits: with the conversion ptxas
    spills 64 bytes under the fp16 plan's 64-register cap instead of 8 (sm_90, Triton 3.6), and
    on an H100 512 x 131072 fp16 took 114.1 us against 100.8 with the bits (57th session,
    widen_few_rows.sh PARTS=cluster); uncapped, the conversion won (8 x 16384: 103.2 against
    105.7; 4 x 65536 at 256 x 262144: 113.8 against 132.2)."""
    if v.dtype == tl.float16 and FP16_WIDEN_CVT:
        wide = tl.inline_asm_elementwise(
            "cvt.f32.f16 $0, $1;", "=r,h", [v], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        wide = _widen_by_bits(v)
    return wide


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


@triton.jit
def _split_task_row(t, tasks, C: tl.constexpr):
    """The row of split-row task ``t`` (clamped: a task past the end reads the last row, masked
    off), int64 for its offsets."""
    return tl.cast(tl.minimum(t, tasks - 1) // C, tl.int64)


@triton.jit
def _split_load(
    X, RES, COUNT, row, cols, mask, stride_x, stride_res, t, tasks,
    C: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
):  # fmt: skip
    """``(x, residual, target)`` for task ``t``: this program's chunks of ``row`` in their dtypes
    (zeros past the row's end or for a task past the last; the residual a scalar 0 where there
    is none), and the count of ``row``'s counter at which all C programs of the row have arrived
    in this launch. Counters are never reset: each launch of a given C adds exactly C to every
    row it walks (int64: no wrap), so before the launch a row's count is a multiple of C, and
    read before this program's own arrival (the load is two steps ahead of it) it is below that
    multiple + C: rounded down, it gives the multiple. A plain load issued with the chunk's, so
    its latency hides behind two steps (an atomic's returned value would be broadcast at once)."""
    live = cols * 0 + t < tasks
    x = tl.load(X + row * stride_x + cols, mask=mask & live, other=0.0)
    res = tl.zeros([], dtype=tl.float32)  # unused: one register, not a second copy of the chunk
    if HAS_RESIDUAL:
        res = tl.load(RES + row * stride_res + cols, mask=mask & live, other=0.0)
    seen = tl.load(COUNT + row, volatile=True)
    return x, res, seen - seen % C + C


@triton.jit
def _split_publish(
    PART, COUNT, H, row, x, res, cols, mask, N, t, tasks,
    C: tl.constexpr, C_POW2: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    """Store this chunk's sum of squares as ``row``'s partial ``chunk`` and arrive on the row's
    counter (release: the partial is visible before the arrival). Returns the chunk the output
    scales: x, or x + residual rounded to H's dtype (what the caller receives as h; stored
    here). A task past the last (``t >= tasks``) stores and arrives nowhere."""
    live = tl.full([], t, tl.int32) < tasks  # a tensor also where t is an int (interpreter)
    chunk = tl.program_id(0) % C
    if HAS_RESIDUAL:
        x = (x.to(ACC) + res.to(ACC)).to(H.dtype.element_ty)
        tl.store(H + row * N + cols, x, mask=mask & (cols * 0 + t < tasks))
    xf = x.to(ACC)
    tl.store(PART + row * C_POW2 + chunk, tl.sum(xf * xf, axis=0), mask=live)
    tl.debug_barrier()  # every thread's part of the sum stored before the (one-thread) release
    tl.atomic_add(COUNT + row, 1, mask=live, sem="release", scope="gpu")
    return x


#: The staged split kernel's wait (compiled kernels): an acquire load of the row's counter in a
#: branch loop until it reaches the target, one inline-PTX statement. Triton's pipeliner refuses a
#: loop that holds another loop (a ``while``) or a barrier, so the wait cannot be either; every
#: thread spins and acquires for itself. Labels inside ``{ }`` are local to the block, so the
#: statement may be inlined many times.
_SPLIT_SPIN = tl.constexpr("""{
.reg .pred %p<1>;
SPLIT_SPIN:
ld.acquire.gpu.global.b64 $0, [$1];
setp.lt.s64 %p0, $0, $2;
@%p0 bra SPLIT_SPIN;
}""")
#: The staged split kernel reads the row's partials after that wait with asm too: the pipeliner
#: issues the loop's ``tl.load``s steps ahead, which would read the partials before they exist.
_SPLIT_LOAD_PART32 = tl.constexpr("ld.relaxed.gpu.global.b32 $0, [$1];")
_SPLIT_LOAD_PART64 = tl.constexpr("ld.relaxed.gpu.global.b64 $0, [$1];")


@triton.jit
def _split_parts(
    PART, COUNT, row, target,
    C: tl.constexpr, C_POW2: tl.constexpr, ACC: tl.constexpr, SPIN_ASM: tl.constexpr,
):  # fmt: skip
    """Wait until the C programs of ``row`` have published (its counter at ``target``,
    acquire), then return the row's C_POW2 partial slots (zeros past C). ``SPIN_ASM``: every
    thread spins in one asm statement (:data:`_SPLIT_SPIN`) and loads the partials with asm;
    else one thread's atomic reads the counter in a ``while`` and a barrier shares it (the
    interpreter's way, and the register-pipelined kernel's)."""
    k = tl.arange(0, C_POW2)
    if SPIN_ASM:
        tl.inline_asm_elementwise(
            _SPLIT_SPIN, "=l,l,l", [(COUNT + row).to(tl.int64, bitcast=True), target],
            dtype=tl.int64, is_pure=False, pack=1,
        )  # fmt: skip
        addr = (PART + row * C_POW2 + k).to(tl.int64, bitcast=True)
        if ACC == tl.float64:
            parts = tl.inline_asm_elementwise(
                _SPLIT_LOAD_PART64, "=l,l", [addr], dtype=tl.float64, is_pure=False, pack=1
            )
        else:
            parts = tl.inline_asm_elementwise(
                _SPLIT_LOAD_PART32, "=r,l", [addr], dtype=tl.float32, is_pure=False, pack=1
            )
        return tl.where(k < C, parts, 0.0)  # slots past C hold no partial
    seen = tl.atomic_add(COUNT + row, 0, sem="acquire", scope="gpu")
    while seen < target:
        seen = tl.atomic_add(COUNT + row, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()
    return tl.load(PART + row * C_POW2 + k, mask=k < C, other=0.0, cache_modifier=".cg")


@triton.jit
def _split_finish(
    Y, RSTD, PART, COUNT, row, target, x, w, cols, mask, N, eps, offset,
    C: tl.constexpr, C_POW2: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_OFFSET: tl.constexpr,
    LLAMA: tl.constexpr, ACC: tl.constexpr, STORE_RSTD: tl.constexpr, X_DTYPE: tl.constexpr,
    SPIN_ASM: tl.constexpr = False,
):  # fmt: skip
    """Wait until the C programs of ``row`` have published (:func:`_split_parts`), sum the C
    partials in chunk order (every program the same order, so the same rstd), scale this
    program's chunk and store it (chunk 0 also stores rstd)."""
    parts = _split_parts(PART, COUNT, row, target, C, C_POW2, ACC, SPIN_ASM)
    rstd = 1.0 / tl.sqrt(tl.sum(parts, axis=0) / N + eps)
    y = x.to(ACC) * rstd
    if LLAMA:
        y = y.to(X_DTYPE).to(ACC)
    if HAS_WEIGHT:
        if HAS_OFFSET:
            y = y * (w.to(ACC) + offset)
        else:
            y = y * w.to(ACC)
    tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=mask)
    if STORE_RSTD:
        tl.store(RSTD + row, rstd, mask=tl.program_id(0) % C == 0)


@triton.jit(do_not_specialize=["M"])
def rmsnorm_forward_split_kernel(
    X,  # pointer to the input rows, row stride stride_x, unit column stride
    RES,  # pointer to the residual rows (read only when HAS_RESIDUAL)
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    Y,  # pointer to the output (M, N), contiguous
    H,  # pointer to the output x + residual (M, N), contiguous (written only when HAS_RESIDUAL)
    RSTD,  # pointer to the inverse RMS per row (M,), ACC dtype
    PART,  # (M, C_POW2) ACC scratch: each row's partial sums of squares, one per chunk
    COUNT,  # (M,) int64 arrival counters of this C, multiples of C (see _split_load)
    stride_x,
    stride_res,
    stride_w,
    M,  # number of rows
    N,  # data width
    eps,
    eps_lo,
    offset,
    offset_lo,
    HAS_WEIGHT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    LLAMA: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # columns per program (a power of two), C * BLOCK >= N
    C: tl.constexpr,  # programs per row (ForwardConfig.split)
    C_POW2: tl.constexpr,  # C rounded up to a power of two (the partials' row stride)
    HAS_OFFSET: tl.constexpr,
    STORE_RSTD: tl.constexpr,
):
    """Each row split over C programs of one cooperative launch (``ForwardConfig.split``): a
    program keeps its BLOCK-column chunk in registers, so x is read from DRAM once, where the
    one-row kernel walks rows wider than its registers twice. The C programs of a row exchange
    their partial sums of squares through PART and wait for each other on COUNT, so all must be
    resident at once: the launch is cooperative (the driver refuses a grid that cannot be
    resident rather than hanging), the grid persistent (G programs, G a multiple of C) and the
    M * C tasks walked in lockstep, task t = pid + k * G being (row t // C, chunk t % C).

    Pipelined two steps ahead: step k+2's chunk is loaded before step k+1's is summed and
    published and step k waits, so the loads go on through the wait (three chunks in registers).
    No deadlock: step 0 publishes before any wait, and step k's wait needs only the partners'
    step-k publications, which each makes before its own wait of step k-1. Deterministic: the
    partials are summed in chunk order (the only atomics are the int32 counters). Through the
    interpreter, which runs programs one after another, only C = 1 can run."""
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    cols = (pid % C) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    if HAS_WEIGHT:
        w = tl.load(W + cols * stride_w, mask=mask, other=0.0)
    else:
        w = tl.zeros([BLOCK], dtype=ACC)  # unused
    tasks = M * C
    row0 = _split_task_row(pid, tasks, C)
    x0, r0, target = _split_load(
        X, RES, COUNT, row0, cols, mask, stride_x, stride_res, pid, tasks, C, HAS_RESIDUAL
    )
    x_cur = _split_publish(
        PART, COUNT, H, row0, x0, r0, cols, mask, N, pid, tasks, C, C_POW2, HAS_RESIDUAL, ACC
    )
    row1 = _split_task_row(pid + g, tasks, C)
    x_n1, r_n1, target_n1 = _split_load(
        X, RES, COUNT, row1, cols, mask, stride_x, stride_res, pid + g, tasks, C, HAS_RESIDUAL
    )
    for t in range(pid, tasks, g):
        row2 = _split_task_row(t + 2 * g, tasks, C)
        x_n2, r_n2, target_n2 = _split_load(
            X, RES, COUNT, row2, cols, mask, stride_x, stride_res, t + 2 * g, tasks, C,
            HAS_RESIDUAL,
        )  # fmt: skip
        h_n1 = _split_publish(
            PART, COUNT, H, _split_task_row(t + g, tasks, C), x_n1, r_n1, cols, mask, N, t + g,
            tasks, C, C_POW2, HAS_RESIDUAL, ACC,
        )  # fmt: skip
        _split_finish(
            Y, RSTD, PART, COUNT, tl.cast(t // C, tl.int64), target, x_cur, w, cols, mask, N,
            eps, offset, C, C_POW2, HAS_WEIGHT, HAS_OFFSET, LLAMA, ACC, STORE_RSTD,
            X.dtype.element_ty,
        )  # fmt: skip
        x_cur = h_n1
        target = target_n1
        target_n1 = target_n2
        x_n1 = x_n2
        r_n1 = r_n2


@triton.jit(do_not_specialize=["M"])
def rmsnorm_forward_split_staged_kernel(
    X, RES, W, Y, H, RSTD, PART, COUNT,  # as rmsnorm_forward_split_kernel's
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
    STAGES: tl.constexpr,  # ForwardConfig.stages (>= 2): the loads STAGES - 1 steps ahead
    SPIN_ASM: tl.constexpr,  # compiled kernels: the wait in asm (see _split_parts)
):  # fmt: skip
    """The split-row forward of :func:`rmsnorm_forward_split_kernel` (the same tasks, counters,
    partials and order of additions, so the same bits), with the plain schedule per step (load,
    sum, publish, wait, scale, store) and the chunk loads pipelined by Triton into shared memory
    (``tl.range(..., num_stages=STAGES)``: cp.async ``STAGES - 1`` steps ahead), where that
    kernel keeps the next two chunks in registers. The loop may hold neither a nested loop nor a
    barrier, or the pipeliner leaves it alone: compiled, the wait is one asm statement and the
    partial's store needs no barrier before the release, because a scalar store and a scalar
    atomic are both made by the same single thread (the one that holds the whole sum; the PTX
    predicates them alike), so the release orders the store. The target comes from the
    publishing atomic's returned value: before this program's arrival the row's count lies in
    ``[k * C, k * C + C)`` for this launch's k (see :func:`_split_load`)."""
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    chunk = pid % C  # constant over the walk: g is a multiple of C
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    if HAS_WEIGHT:
        w = tl.load(W + cols * stride_w, mask=mask, other=0.0)
    else:
        w = tl.zeros([BLOCK], dtype=ACC)  # unused
    for t in tl.range(pid, M * C, g, num_stages=STAGES):
        row = tl.cast(t // C, tl.int64)
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0)
        if HAS_RESIDUAL:
            res = tl.load(RES + row * stride_res + cols, mask=mask, other=0.0)
            x = (x.to(ACC) + res.to(ACC)).to(H.dtype.element_ty)
            tl.store(H + row * N + cols, x, mask=mask)
        xf = x.to(ACC)
        tl.store(PART + row * C_POW2 + chunk, tl.sum(xf * xf, axis=0))
        if not SPIN_ASM:
            tl.debug_barrier()
        seen = tl.atomic_add(COUNT + row, 1, sem="release", scope="gpu")
        _split_finish(
            Y, RSTD, PART, COUNT, row, seen - seen % C + C, x, w, cols, mask, N, eps, offset,
            C, C_POW2, HAS_WEIGHT, HAS_OFFSET, LLAMA, ACC, STORE_RSTD, X.dtype.element_ty,
            SPIN_ASM,
        )  # fmt: skip


#: The cluster forward's meeting point: every thread of the CTA arrives (release) and waits
#: (acquire) at its cluster's barrier, so each CTA's partial, stored before the arrive, is
#: visible to every CTA of the cluster after the wait.
_CLUSTER_BARRIER = tl.constexpr(
    "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\nmov.u32 $0, 0;"
)


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


@triton.jit
def _dy_sum(dy, B_PTRS, C_PTRS, mask, DY_PARTS: tl.constexpr, DY_SUM: tl.constexpr, ACC):
    """dy's loaded values plus the parts the Inductor pass folded into the launch (the sum of
    GEMM outputs that formed dy): summed in ACC in the graph's order, (dy + b) + c, and rounded
    once to DY_SUM, the sum's dtype (the parts' own, or wider under autocast), as Inductor's
    fused add stored it. Returned in ACC."""
    if DY_PARTS == 1:
        return dy.to(ACC)
    total = dy.to(ACC) + tl.load(B_PTRS, mask=mask, other=0.0).to(ACC)
    if DY_PARTS == 3:
        total += tl.load(C_PTRS, mask=mask, other=0.0).to(ACC)
    return total.to(DY_SUM).to(ACC)


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


@triton.jit
def _dweight_tree_finish(
    acc,  # (BLOCK,) this program's partial, float64
    DW,  # pointer to the weight gradient (N,), weight dtype
    SLOTS,  # pointer to the partials (leaves, N): slot k of column c at SLOTS + k * N + c
    COUNTERS,  # pointer to this column tile's int32 counters (leaves,), zero on entry
    leaf,  # this program's leaf index (int32 scalar)
    leaves,  # number of leaves (programs along the row-group axis)
    N,
    cols,
    mask,
    FANOUT: tl.constexpr,  # children per tree node (2: a binary tree)
):
    """Sum the partials of all row groups over a fixed tree, inside the same launch.

    A node whose children each cover ``span`` leaves covers ``[first, first + FANOUT * span)``;
    its children start at ``first + k * span``. Every child stores its value in its slot and
    takes a ticket from the node's counter (an integer atomic); the last to arrive adds the
    children's slots in index order, so the node's value does not depend on who arrived last,
    and resets the counter to 0 for the next launch on this stream. Counter ``first + span``
    (the second child's first leaf) is unique per node: its remainder modulo the node's width is
    ``span``, which differs between levels.
    """
    base = leaf
    span = leaf * 0 + 1
    active = leaf >= 0  # an i1 scalar: still carrying a value up the tree
    while span < leaves:
        if active:
            first = base - base % (span * FANOUT)
            children = tl.minimum((leaves - first + span - 1) // span, FANOUT)
            if children > 1:
                tl.store(SLOTS + base.to(tl.int64) * N + cols, acc, mask=mask)
                tl.debug_barrier()  # every thread's slot store happens before the release below
                node = COUNTERS + first + span
                ticket = tl.atomic_add(node, 1, sem="acq_rel", scope="gpu")
                if ticket < children - 1:
                    active = ticket < 0  # not the last child: the last one finishes this node
                else:
                    tl.store(node, 0)
                    total = tl.zeros_like(acc)
                    for k in tl.static_range(FANOUT):
                        child = first + k * span
                        if child < leaves:
                            total += tl.load(
                                SLOTS + child.to(tl.int64) * N + cols,
                                mask=mask,
                                other=0.0,
                                cache_modifier=".cg",  # L2, never a stale L1 line
                            )
                    acc = total
            base = first
        span = span * FANOUT
    if active:
        if DW.dtype.element_ty == tl.float64:
            tl.store(DW + cols, acc, mask=mask)
        else:
            # Through float32: Triton's interpreter has no direct float64 -> bfloat16 cast (it
            # yields NaN); the extra rounding adds at most 2**-24 relative.
            tl.store(DW + cols, acc.to(tl.float32).to(DW.dtype.element_ty), mask=mask)


@triton.jit
def _dx(u, x, rstd, mean_ux):
    """dx of a row (or rows: ``rstd`` and ``mean_ux`` broadcast against ``u`` and ``x``)."""
    return (u - x * (rstd * rstd * mean_ux)) * rstd


@triton.jit
def _dw_term(dy, x, rstd, LLAMA: tl.constexpr, X_DTYPE: tl.constexpr, DW_ACC: tl.constexpr):
    """One row's (or rows') dweight term, in DW_ACC."""
    if LLAMA:
        # The weight multiplied the normalised value rounded to X's dtype: so does dw.
        xr = (x * rstd).to(X_DTYPE)
        return dy.to(DW_ACC) * xr.to(DW_ACC)
    else:
        # float32: for 16-bit inputs dy * x is exact, the product with rstd rounds once;
        # float64: every term is exact up to rstd's own rounding.
        return (dy.to(DW_ACC) * x.to(DW_ACC)) * rstd.to(DW_ACC)


@triton.jit
def _row_backward(
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
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    DY_PARTS: tl.constexpr,
    DY_SUM: tl.constexpr,
    HAS_DX2: tl.constexpr,
    ACC: tl.constexpr,
    ONE_TILE: tl.constexpr,
):
    """dx of one row's ``cols`` (the whole row when ``ONE_TILE``, else one column tile after the
    row's ``mean(u*x)`` in MEAN_UX), stored to DX (and DX2); returns ``(dy, x, rstd)`` in ACC for
    the row's dweight term. Shared by the row kernels with one row per step."""
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(ACC)
    dy = _dy_sum(
        tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0),
        DY_B + row * stride_dy_b + cols,
        DY_C + row * stride_dy_c + cols,
        mask,
        DY_PARTS,
        DY_SUM,
        ACC,
    )
    rstd = tl.load(RSTD + row)
    if HAS_WEIGHT:
        # Re-read per row (an L1/L2 hit) instead of pinning BLOCK more registers.
        u = dy * (tl.load(W + cols * stride_w, mask=mask, other=0.0).to(ACC) + offset)
    else:
        u = dy
    if ONE_TILE:
        mean_ux = tl.sum(u * x, axis=0) / N
    else:
        mean_ux = tl.load(MEAN_UX + row)
    dx = _dx(u, x, rstd, mean_ux)
    if HAS_DH:
        dx += tl.load(DH + row * stride_dh + cols, mask=mask, other=0.0).to(ACC)
    tl.store(DX + row * N + cols, dx.to(DX.dtype.element_ty), mask=mask)
    if HAS_DX2:
        tl.store(DX2 + row * N + cols, dx.to(DX2.dtype.element_ty), mask=mask)
    return dy, x, rstd


@triton.jit
def _dweight_finish(
    dw,  # (BLOCK,) this program's partial over its rows, DW_ACC
    DW,
    DW_PARTIAL,
    COUNTERS,  # this column tile's counters
    pid,
    groups,
    N,
    cols,
    mask,
    TREE: tl.constexpr,
    FANOUT: tl.constexpr,
):
    """Partials meet in float64: the sum adds no visible error, whatever the number of groups.
    Either over the fixed tree now, or stored for the sum launch."""
    if TREE:
        _dweight_tree_finish(
            dw.to(tl.float64), DW, DW_PARTIAL, COUNTERS, pid, groups, N, cols, mask, FANOUT
        )
    else:
        # In DW_ACC (float32 rows: half the bytes of float64); the sum launch widens each
        # value exactly, so dweight's bits are those of float64 partials.
        tl.store(
            DW_PARTIAL + pid.to(tl.int64) * N + cols, dw.to(DW_PARTIAL.dtype.element_ty), mask=mask
        )


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


@triton.jit
def _widened(v, ACC: tl.constexpr):
    """``v`` in ACC: 16-bit values by :func:`_widen_exact`, others cast."""
    if v.dtype == tl.float16 or v.dtype == tl.bfloat16:
        return _widen_exact(v).to(ACC)
    else:
        return v.to(ACC)


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


@triton.jit(do_not_specialize=["M", "rows_per_program"])
def rmsnorm_backward_rows_kernel(
    DY,  # pointer to the upstream gradient rows, row stride stride_dy, unit column stride
    X,  # pointer to the normalised input rows (x, or x + residual), row stride stride_x
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    RSTD,  # pointer to the inverse RMS per row saved by the forward pass (M,)
    DH,  # pointer to the gradient of the returned x + residual (read only when HAS_DH)
    DY_B,  # pointers to dy's other parts (read only when DY_PARTS > 1, resp. 3)
    DY_C,
    DX,  # pointer to the input gradient (M, N), contiguous
    DX2,  # pointer to a second copy of dx in another dtype (M, N), contiguous (when HAS_DX2)
    DW,  # pointer to the weight gradient (N,), weight dtype (written only when HAS_WEIGHT)
    DW_PARTIAL,  # pointer to the per-program dweight partials (groups, N), as in the row kernel
    COUNTERS,  # pointer to int32 tree counters (groups,), zero on entry and on exit
    stride_dy,
    stride_x,
    stride_dh,
    stride_w,  # elements between two values of W
    stride_dy_b,
    stride_dy_c,
    M,  # number of rows
    N,  # data width
    rows_per_program,  # program p owns rows [p * rows_per_program, (p + 1) * rows_per_program)
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
    BLOCK: tl.constexpr,  # >= N, a power of two: whole rows
    ROWS: tl.constexpr,  # rows per step: a (ROWS, BLOCK) tile
    STAGES: tl.constexpr,  # software pipelining depth of the step loop
    TREE: tl.constexpr,
    FANOUT: tl.constexpr,
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """Short rows: the backward of :func:`rmsnorm_backward_kernel` (one tile per row), ``ROWS``
    rows per step, so each step moves enough bytes and its ROWS row reductions run side by side
    instead of one after another. The weight is read once per program.

    dweight: each of the ROWS lanes sums its rows in order; the lanes are summed once at the end
    (a fixed reduction of the compiled kernel), so the partial is a fixed-order sum.
    """
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    groups = tl.num_programs(0)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    row_start = pid.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N
    if HAS_WEIGHT:
        w = tl.load(W + cols * stride_w, mask=col_mask, other=0.0).to(ACC) + offset
    dw = tl.zeros([ROWS, BLOCK], dtype=DW_ACC)
    for first in tl.range(row_start, row_end, ROWS, num_stages=STAGES):
        rows = first + tl.arange(0, ROWS)
        row_mask = rows < row_end
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(ACC)
        dy = _dy_sum(
            tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0),
            DY_B + rows[:, None] * stride_dy_b + cols[None, :],
            DY_C + rows[:, None] * stride_dy_c + cols[None, :],
            mask,
            DY_PARTS,
            DY_SUM,
            ACC,
        )
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)[:, None]
        if HAS_WEIGHT:
            u = dy * w[None, :]
        else:
            u = dy
        mean_ux = (tl.sum(u * x, axis=1) / N)[:, None]
        dx = _dx(u, x, rstd, mean_ux)
        if HAS_DH:
            dh = tl.load(DH + rows[:, None] * stride_dh + cols[None, :], mask=mask, other=0.0)
            dx += dh.to(ACC)
        tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_DX2:
            dx2_ptrs = DX2 + rows[:, None] * N + cols[None, :]
            tl.store(dx2_ptrs, dx.to(DX2.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw += _dw_term(dy, x, rstd, LLAMA, X.dtype.element_ty, DW_ACC)  # masked rows add 0
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
            col_mask,
            TREE,
            FANOUT,
        )


@triton.jit(do_not_specialize=["M", "rows_per_program"])
def rmsnorm_backward_columns_kernel(
    DY,  # pointer to the upstream gradient rows, row stride stride_dy, unit column stride
    X,  # pointer to the normalised input rows (x, or x + residual), row stride stride_x
    W,  # pointer to the weight (N,) (read only when HAS_WEIGHT)
    RSTD,  # pointer to the inverse RMS per row saved by the forward pass (M,)
    DH,  # pointer to the gradient of the returned x + residual (read only when HAS_DH)
    DY_B,  # pointers to dy's other parts (read only when DY_PARTS > 1, resp. 3)
    DY_C,
    DX,  # pointer to the input gradient (M, N), contiguous
    DX2,  # pointer to a second copy of dx in another dtype (M, N), contiguous (when HAS_DX2)
    DW,  # pointer to the weight gradient (N,), weight dtype (written only when HAS_WEIGHT)
    stride_dy,
    stride_x,
    stride_dh,
    stride_w,  # elements between two values of W
    stride_dy_b,
    stride_dy_c,
    M,  # number of rows
    N,  # data width
    rows_per_program,  # row program p owns rows [p * rows_per_program, (p + 1) * rows_per_program)
    row_programs,  # programs [0, row_programs) compute dx; the others one dweight column strip
    offset,  # u = dy * (offset + w): float32 high part ...
    offset_lo,  # ... and low part
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    DY_PARTS: tl.constexpr,
    DY_SUM: tl.constexpr,
    HAS_DX2: tl.constexpr,
    LLAMA: tl.constexpr,
    ACC: tl.constexpr,
    DW_ACC: tl.constexpr,
    BLOCK: tl.constexpr,  # >= N, a power of two: whole rows
    STAGES: tl.constexpr,  # software pipelining depth of the row programs' loop
    COL_BLOCK: tl.constexpr,  # columns of one dweight strip
    COL_ROWS: tl.constexpr,  # rows per step of a strip: a (COL_ROWS, COL_BLOCK) tile
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """Small M: dx and dweight in one launch, with no partials and no second pass.

    dweight needs no dx: ``dw[j] = sum_i dy[i, j] * x[i, j] * rstd[i]`` (or Llama's rounded
    ``x * rstd``), with rstd saved by the forward. So the launch has two kinds of programs that
    never wait on each other. The first ``row_programs`` walk their rows as
    :func:`rmsnorm_backward_kernel` does and store dx. Each of the others sums one strip of
    ``COL_BLOCK`` columns over all M rows, ``COL_ROWS`` rows per step in row order, and stores
    that strip of dweight. The order of additions is fixed by the config alone: dweight is
    bitwise reproducible. Both kinds read x and dy (small M: the second read is from L2).
    """
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    offset = tl.cast(offset, ACC) + tl.cast(offset_lo, ACC)
    if pid < row_programs:
        row_start = pid.to(tl.int64) * rows_per_program
        row_end = tl.minimum(row_start + rows_per_program, M)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        for row in tl.range(row_start, row_end, num_stages=STAGES):
            _row_backward(
                DY,
                X,
                W,
                RSTD,
                RSTD,  # MEAN_UX: unread (one tile per row)
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
                True,
            )
    else:
        # Names of their own: Triton types a name alike in both arms of a runtime branch.
        s_cols = (pid - row_programs) * COL_BLOCK + tl.arange(0, COL_BLOCK)
        s_col_mask = s_cols < N
        s_dw = tl.zeros([COL_BLOCK], dtype=DW_ACC)
        for first in tl.range(0, M, COL_ROWS):
            s_rows = first + tl.arange(0, COL_ROWS).to(tl.int64)  # int64 row offsets below
            s_row_mask = s_rows < M
            s_mask = s_row_mask[:, None] & s_col_mask[None, :]
            s_x = tl.load(X + s_rows[:, None] * stride_x + s_cols[None, :], mask=s_mask, other=0.0)
            s_dy = _dy_sum(
                tl.load(DY + s_rows[:, None] * stride_dy + s_cols[None, :], mask=s_mask, other=0.0),
                DY_B + s_rows[:, None] * stride_dy_b + s_cols[None, :],
                DY_C + s_rows[:, None] * stride_dy_c + s_cols[None, :],
                s_mask,
                DY_PARTS,
                DY_SUM,
                ACC,
            )
            s_rstd = tl.load(RSTD + s_rows, mask=s_row_mask, other=0.0)[:, None]
            # masked rows and columns load 0: their terms add 0
            s_term = _dw_term(s_dy, s_x.to(ACC), s_rstd, LLAMA, X.dtype.element_ty, DW_ACC)
            s_dw += tl.sum(s_term, axis=0)
        tl.store(DW + s_cols, s_dw.to(DW.dtype.element_ty), mask=s_col_mask)


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


@triton.jit
def dweight_sum_kernel(
    PARTIAL,  # pointer to the per-program partials (G, N), float32 or float64
    DW,  # pointer to the weight gradient (N,), weight dtype
    G,  # number of partial rows
    N,  # data width
    BLOCK_G: tl.constexpr,  # partial rows summed at once
    BLOCK_N: tl.constexpr,  # columns per program
    PDL: tl.constexpr = False,  # emit _pdl_prologue's wait and early start (config.PDL)
):
    """The dweight finish as a second launch (large tensors, where it beats the in-launch tree's
    sequential tail): column sums of the partials in a fixed order."""
    _pdl_prologue(PDL)
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float64)
    for start in range(0, G, BLOCK_G):
        rows = start + tl.arange(0, BLOCK_G)
        mask = (rows[:, None] < G) & col_mask[None, :]
        acc += tl.load(
            PARTIAL + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0
        ).to(tl.float64)  # exact for float32 partials
    total = tl.sum(acc, axis=0)
    if DW.dtype.element_ty == tl.float64:
        tl.store(DW + cols, total, mask=col_mask)
    else:
        tl.store(DW + cols, total.to(tl.float32).to(DW.dtype.element_ty), mask=col_mask)

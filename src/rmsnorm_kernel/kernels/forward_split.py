"""The split-row forward: each row over ``C`` programs of one cooperative launch, which exchange
their partial sums of squares through a scratch buffer and wait on the row's counter; the
partials are summed in chunk order (the only atomics are integer counters), so every program of
a row computes the same inverse RMS."""

from __future__ import annotations

import triton
import triton.language as tl


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

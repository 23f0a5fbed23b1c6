"""An experiment (39th session, not in the package): rows split over the CTAs of a hardware
thread-block cluster, on Triton 3.6, which cannot compile ``num_ctas > 1`` (its PlanCTA pass
fails for every kernel here; see README, the seventh session of 2026-11-30).

The kernel is compiled as an ordinary one-CTA program; only the *launch* makes clusters: Triton's
NVIDIA launcher takes the cluster size from the ``num_ctas`` field of the packed metadata it is
handed (``(num_warps, num_ctas, shared)`` on 3.6; ``gridDimX = grid * num_ctas``, cluster dims
``(num_ctas, 1, 1)``), so :func:`cluster_forward` hands it ``C``. CTAs ``C*r .. C*r + C - 1`` then
form one cluster, which the hardware schedules all at once: the C chunks of row ``r`` are
co-resident by construction, with no cooperative or persistent grid, no counters and no spin.
Each CTA sums its chunk's squares, stores the partial (one thread), and meets its partners at one
``barrier.cluster`` (arrive.release / wait.acquire: the partials stored before the arrive are
visible after the wait), then reads the row's C partials from L2 (``.cg``: a line of partials
may sit stale in this SM's L1 from an earlier row), sums them in chunk order (the package's
bits) and scales its chunk. It is the one-row kernel's schedule (the 16-bit chunk kept packed,
widened by its bits; the weight loaded late), at one cluster barrier a row: quack's wide-row
design, with the partials through L2 instead of distributed shared memory.

x: (M, N) float16 / bfloat16 / float32 rows, unit column stride; w: (N,). float32 math.
Clusters up to 8 CTAs (the portable limit).

Variants, timed in the 42nd and 43rd sessions (``split_tune.py --dsmem [--reload R]
[--maxnreg R]``; results and verdicts in README.md): ``EXCHANGE`` (the partials through
distributed shared memory, or no meeting at all, a wrong answer that prices the meeting),
``RELOAD`` / ``WHOLE_SUM`` (x not held over the meeting), ``maxnreg`` (a ptxas register cap)."""

from __future__ import annotations

import triton
import triton.language as tl

from rmsnorm_kernel.kernels import common

#: Every thread of the CTA arrives (release) and waits (acquire) at the cluster's barrier.
_CLUSTER_BARRIER = tl.constexpr(
    "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\nmov.u32 $0, 0;"
)
_CLUSTER_ARRIVE = tl.constexpr("barrier.cluster.arrive.release.aligned;\nmov.u32 $0, 0;")
_CLUSTER_WAIT = tl.constexpr("barrier.cluster.wait.acquire.aligned;\nmov.u32 $0, 0;")
#: The most CTAs a cluster takes without the non-portable attribute.
MAX_CLUSTER = 8
#: The start of the DSMEM exchange (EXCHANGE=1): each CTA arrives (relaxed) as it starts; the
#: matching wait before its first remote store proves every partner has started (a CTA may write
#: a partner's shared memory only then).
_CLUSTER_START = tl.constexpr("barrier.cluster.arrive.relaxed.aligned;\nmov.u32 $0, 0;")


def _dsmem_asm(c: int) -> str:
    """EXCHANGE=1 (42nd session): the row's partials through distributed shared memory instead
    of L2. Thread t < C stores this CTA's partial ($C) into slot ``rank`` of CTA t's own
    ``rk_slots`` (``mapa`` + ``st.shared::cluster``), the cluster meets once (release /
    acquire), and every thread reads the C slots of its own CTA ($0 .. $C-1): two SM-to-SM hops
    instead of a store to and a load from L2."""
    loads = "\n".join(f"ld.shared.b32 ${i}, [rk_slots+{4 * i}];" for i in range(c))
    return f"""{{
.shared .align 16 .b32 rk_slots[8];
.reg .pred %rkp;
.reg .u32 %rkt, %rka, %rkr;
mov.u32 %rkt, %tid.x;
mov.u32 %rka, %cluster_ctarank;
shl.b32 %rka, %rka, 2;
mov.u32 %rkr, rk_slots;
add.u32 %rka, %rka, %rkr;
setp.lt.u32 %rkp, %rkt, {c};
barrier.cluster.wait.aligned;
@%rkp mapa.shared::cluster.u32 %rkr, %rka, %rkt;
@%rkp st.shared::cluster.b32 [%rkr], ${c};
barrier.cluster.arrive.release.aligned;
barrier.cluster.wait.acquire.aligned;
{loads}
}}"""


_DSMEM2 = tl.constexpr(_dsmem_asm(2))
_DSMEM4 = tl.constexpr(_dsmem_asm(4))
_DSMEM8 = tl.constexpr(_dsmem_asm(8))


@triton.jit
def _dsmem_total(s, C: tl.constexpr, C_POW2: tl.constexpr):
    """The row's C partials through DSMEM (:func:`_dsmem_asm`), summed as :func:`_scaled` sums
    the loaded ones (the same vector, the same reduction: the same bits)."""
    k = tl.arange(0, C_POW2)
    if C == 2:
        p = tl.inline_asm_elementwise(
            _DSMEM2, "=r,=r,r", [s], dtype=(tl.float32,) * 2, is_pure=False, pack=1
        )
    elif C == 4:
        p = tl.inline_asm_elementwise(
            _DSMEM4, "=r,=r,=r,=r,r", [s], dtype=(tl.float32,) * 4, is_pure=False, pack=1
        )
    else:
        p = tl.inline_asm_elementwise(
            _DSMEM8, "=r,=r,=r,=r,=r,=r,=r,=r,r", [s], dtype=(tl.float32,) * 8, is_pure=False,
            pack=1,
        )  # fmt: skip
    parts = tl.zeros([C_POW2], dtype=tl.float32)
    for i in tl.static_range(C):
        parts = tl.where(k == i, p[i], parts)
    return tl.sum(parts, axis=0)


@triton.jit
def _scaled(
    X, x16, s, PART, row, N, eps, C: tl.constexpr, C_POW2: tl.constexpr, FROM_PART: tl.constexpr
):
    """After the meeting: the row's C partials (this CTA's ``s`` where C = 1 or not FROM_PART:
    the total already) summed in chunk order, and the chunk scaled by rstd (16-bit chunks
    widened by their bits): ``(y, rstd)``."""
    if C > 1 and FROM_PART:
        k = tl.arange(0, C_POW2)
        parts = tl.load(PART + row * C_POW2 + k, mask=k < C, other=0.0, cache_modifier=".cg")
        total = tl.sum(parts, axis=0)
    else:
        total = s
    rstd = 1.0 / tl.sqrt(total / N + eps)
    if X.dtype.element_ty == tl.float32:
        y = x16 * rstd
    else:
        y = common._widen_by_bits(x16) * rstd
    return y, rstd


@triton.jit
def cluster_split_kernel(
    X, W, Y, RSTD, PART, stride_x, stride_w, N, eps,
    BLOCK: tl.constexpr, C: tl.constexpr, C_POW2: tl.constexpr, ASM: tl.constexpr,
    EVEN: tl.constexpr,  # N == C * BLOCK: loads and stores without masks (registers)
    W_EARLY: tl.constexpr = False,  # arrive, load the weight, then wait (its latency in the wait)
    EXCHANGE: tl.constexpr = 0,  # partials through 0: L2; 1: DSMEM; 2: none (timing only: wrong)
    RELOAD: tl.constexpr = 0,  # > 0: x not held over the meeting: reloaded (L1 / L2) after it,
    # and the first pass in RELOAD sub-chunks (fewer registers: more CTAs an SM, as quack's
    # reload of x from shared memory)
    WHOLE_SUM: tl.constexpr = False,  # with RELOAD: the first pass one load and one sum (the
    # split kernel's bits on the CPU; not on an H100, 43rd session), only the second in sub-chunks
):  # fmt: skip
    """CTA ``pid`` handles chunk ``pid % C`` of row ``pid // C``; PART (M, C_POW2) float32
    scratch. ``ASM`` False (the interpreter, C = 1): no barrier."""
    if ASM and C > 1 and EXCHANGE == 1:
        tl.inline_asm_elementwise(_CLUSTER_START, "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    pid = tl.program_id(0)
    row = tl.cast(pid // C, tl.int64)
    chunk = pid % C
    # scalar bases plus a constant range: per-element offsets the compiler folds into the
    # address (a runtime ``chunk * BLOCK + arange`` costs registers: it spilled at 32 warps)
    start = chunk * BLOCK
    cols = tl.arange(0, BLOCK)
    mask = cols < N - start
    x_ptr = X + row * stride_x + start
    SUB: tl.constexpr = BLOCK // (RELOAD + (RELOAD == 0))
    sub = tl.arange(0, SUB)
    if RELOAD and not WHOLE_SUM:
        acc = tl.zeros([SUB], dtype=tl.float32)
        for k in tl.static_range(RELOAD):
            xk = tl.load(
                x_ptr + k * SUB + sub, mask=k * SUB + sub < N - start, other=0.0,
                eviction_policy="evict_last",
            ).to(tl.float32)  # fmt: skip
            acc += xk * xk
        s = tl.sum(acc, axis=0)
    else:
        if EVEN:
            x16 = tl.load(x_ptr + cols)
        else:
            x16 = tl.load(x_ptr + cols, mask=mask, other=0.0)
        xf = x16.to(tl.float32)
        s = tl.sum(xf * xf, axis=0)
    w_ptr = W + start * stride_w
    if C > 1 and EXCHANGE == 1 and ASM:
        if W_EARLY:  # issued before the meeting: its latency hides in the exchange
            if EVEN:
                w = tl.load(w_ptr + cols * stride_w)
            else:
                w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0)
        s = _dsmem_total(s, C, C_POW2)
    if C > 1 and EXCHANGE == 0:
        tl.store(PART + row * C_POW2 + chunk, s)
        if ASM and W_EARLY:
            tl.inline_asm_elementwise(
                _CLUSTER_ARRIVE, "=r", [], dtype=tl.int32, is_pure=False, pack=1
            )
        if W_EARLY:
            if EVEN:
                w = tl.load(w_ptr + cols * stride_w)
            else:
                w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0)
        if ASM:
            tl.inline_asm_elementwise(
                _CLUSTER_WAIT if W_EARLY else _CLUSTER_BARRIER, "=r", [], dtype=tl.int32,
                is_pure=False, pack=1,
            )  # fmt: skip
    y_ptr = Y + row * N + start
    if RELOAD:  # after the meeting, in sub-chunks: x from L1 / L2 (not DRAM) and the weight
        for k in tl.static_range(RELOAD):
            ck = k * SUB + sub
            mk = ck < N - start
            xk = tl.load(x_ptr + ck, mask=mk, other=0.0, eviction_policy="evict_first")
            yk, rstd = _scaled(X, xk, s, PART, row, N, eps, C, C_POW2, EXCHANGE == 0)
            wk = tl.load(w_ptr + ck * stride_w, mask=mk, other=0.0)
            tl.store(y_ptr + ck, (yk * wk.to(tl.float32)).to(Y.dtype.element_ty), mask=mk)
    else:
        y, rstd = _scaled(X, x16, s, PART, row, N, eps, C, C_POW2, EXCHANGE == 0)
        # loaded late (not held through the wait) unless loaded early above
        if not (W_EARLY and C > 1 and (EXCHANGE == 0 or (EXCHANGE == 1 and ASM))):
            if EVEN:
                w = tl.load(w_ptr + cols * stride_w)
            else:
                w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0)
        if EVEN:
            tl.store(y_ptr + cols, (y * w.to(tl.float32)).to(Y.dtype.element_ty))
        else:
            tl.store(y_ptr + cols, (y * w.to(tl.float32)).to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + row, rstd, mask=chunk == 0)


@triton.jit
def cluster_walk_kernel(
    X, W, Y, RSTD, PART, stride_x, stride_w, M, N, eps,
    BLOCK: tl.constexpr, C: tl.constexpr, C_POW2: tl.constexpr, ASM: tl.constexpr,
    EVEN: tl.constexpr,
    HOLD_W: tl.constexpr,  # the weight chunk loaded once and held over the rows
):  # fmt: skip
    """The 41st session's variant of :func:`cluster_split_kernel`: G clusters (the grid over C)
    walk rows ``cid, cid + G, ...``, and each CTA loads its chunk of the *next* row between the
    barrier's arrive and its wait, so the DRAM read of row r + G overlaps row r's meeting (the
    one-row-a-cluster kernel waits with nothing in flight). Clusters do not wait for each other,
    so any G runs (clusters beyond those resident start when one ends). Partials: one slot a row
    (PART (M, C_POW2)), never reused within a launch. Same sums in the same order: the same
    bits."""
    pid = tl.program_id(0)
    cid = pid // C
    chunk = pid % C
    g = tl.num_programs(0) // C
    start = chunk * BLOCK
    cols = tl.arange(0, BLOCK)
    mask = cols < N - start
    w_ptr = W + start * stride_w
    if HOLD_W:
        if EVEN:
            w_held = tl.load(w_ptr + cols * stride_w).to(tl.float32)
        else:
            w_held = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0).to(tl.float32)
    x_ptr = X + tl.cast(cid, tl.int64) * stride_x + start
    if EVEN:
        x16 = tl.load(x_ptr + cols)
    else:
        x16 = tl.load(x_ptr + cols, mask=mask, other=0.0)
    for r in range(cid, M, g):
        row = tl.cast(r, tl.int64)
        xf = x16.to(tl.float32)
        s = tl.sum(xf * xf, axis=0)
        # the next row (the last row again at the end: an in-bounds read, never used)
        nxt = tl.cast(tl.minimum(r + g, M - 1), tl.int64)
        n_ptr = X + nxt * stride_x + start
        if C > 1:
            tl.store(PART + row * C_POW2 + chunk, s)
            if ASM:
                tl.inline_asm_elementwise(
                    _CLUSTER_ARRIVE, "=r", [], dtype=tl.int32, is_pure=False, pack=1
                )
        if EVEN:
            x_next = tl.load(n_ptr + cols)
        else:
            x_next = tl.load(n_ptr + cols, mask=mask, other=0.0)
        if C > 1:
            if ASM:
                tl.inline_asm_elementwise(
                    _CLUSTER_WAIT, "=r", [], dtype=tl.int32, is_pure=False, pack=1
                )
        y, rstd = _scaled(X, x16, s, PART, row, N, eps, C, C_POW2, True)
        if HOLD_W:
            w = w_held
        elif EVEN:
            w = tl.load(w_ptr + cols * stride_w).to(tl.float32)
        else:
            w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0).to(tl.float32)
        y_ptr = Y + row * N + start
        if EVEN:
            tl.store(y_ptr + cols, (y * w).to(Y.dtype.element_ty))
        else:
            tl.store(y_ptr + cols, (y * w).to(Y.dtype.element_ty), mask=mask)
        tl.store(RSTD + row, rstd, mask=chunk == 0)
        x16 = x_next


#: (block, num_warps, C, device) -> the compiled kernel and its cluster-launch metadata.
_COMPILED: dict = {}


def cluster_forward(
    x,
    w,
    eps,
    block,
    num_warps,
    w_early=False,
    walk=0,
    hold_w=False,
    exchange=0,
    maxnreg=None,
    reload=0,
    whole_sum=False,
):
    """(y, rstd): ``x``'s rows over ``C = ceil(N / block)`` CTAs a cluster (C <= MAX_CLUSTER),
    one row a cluster; ``walk`` > 0: :func:`cluster_walk_kernel` with ``walk`` CTAs an SM's
    worth of clusters, ``min(M, SMs * walk // C)`` (one on the CPU), each walking its rows with
    the next row loaded during the wait (``hold_w``: the weight held over the rows)."""
    import torch

    m, n = x.shape
    c = -(-n // block)
    if c > MAX_CLUSTER:
        raise ValueError(f"cluster_forward: {c} CTAs a row, over {MAX_CLUSTER} (block={block})")
    c_pow2 = 1 << (c - 1).bit_length()
    y = torch.empty_like(x)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    part = torch.empty(m * c_pow2, device=x.device, dtype=torch.float32)
    consts = dict(BLOCK=block, C=c, C_POW2=c_pow2, ASM=x.is_cuda, EVEN=n == c * block)
    if walk:
        kernel = cluster_walk_kernel
        args = (x, w, y, rstd, part, x.stride(0), w.stride(0), m, n, eps)
        consts["HOLD_W"] = hold_w
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
        clusters = max(1, min(m, sms * walk // c))
    else:
        kernel = cluster_split_kernel
        args = (x, w, y, rstd, part, x.stride(0), w.stride(0), n, eps)
        consts["W_EARLY"] = w_early
        consts["EXCHANGE"] = exchange
        consts["RELOAD"] = reload
        consts["WHOLE_SUM"] = whole_sum
        clusters = m
    if not x.is_cuda or c == 1:  # one CTA a row: an ordinary launch
        kernel[(clusters * c,)](*args, **consts, num_warps=num_warps)
        return y, rstd
    key = (kernel.__name__, block, num_warps, c, x.device, x.dtype, w.dtype, w_early, hold_w)
    key += (whole_sum, reload, exchange, maxnreg)
    if key not in _COMPILED:
        opts = {} if maxnreg is None else {"maxnreg": maxnreg}  # ptxas' register cap
        compiled = kernel.warmup(*args, **consts, grid=(1,), num_warps=num_warps, **opts)
        if hasattr(compiled, "result"):  # an async-compile future (triton >= 3.5)
            compiled = compiled.result()
        compiled._init_handles()
        packed = list(compiled.packed_metadata)
        packed[1] = c  # (num_warps, num_ctas, shared): the launcher's cluster size
        _COMPILED[key] = (compiled, tuple(packed))
    compiled, packed = _COMPILED[key]
    stream = torch.cuda.current_stream(x.device).cuda_stream
    # grid `clusters`: the launcher launches clusters * c CTAs in clusters of c
    compiled.run(
        clusters, 1, 1, stream, compiled.function, packed, None, None, None,
        *args, *consts.values(),
    )  # fmt: skip
    return y, rstd

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

from rmsnorm_kernel.kernels import common, forward_split

#: Diagnostics of the wait's cost (split_tune.py --wide-sync): "all" every thread spins
#: (forward_split._SPLIT_SPIN, the package's staged kernel's way); "lane0" one lane a warp spins,
#: then bar.warp.sync (which orders memory among the warp's threads) before the partials' loads, 32x
#: fewer acquire loads on the counter's L2 line; "none" no wait at all (rstd from this chunk alone:
#: wrong values, reported by the error column, timed for the bound).
SYNCS = ("all", "lane0", "none")
_LANE0_SPIN = tl.constexpr("""{
.reg .pred %p<2>;
.reg .b32 %lane;
mov.u32 %lane, %laneid;
setp.ne.u32 %p1, %lane, 0;
mov.b64 $0, 0;
@%p1 bra LANE0_DONE;
LANE0_SPIN:
ld.acquire.gpu.global.b64 $0, [$1];
setp.lt.s64 %p0, $0, $2;
@%p0 bra LANE0_SPIN;
LANE0_DONE:
bar.warp.sync -1;
}""")


def variant_kernel(sync: str):
    """``wide_split_kernel`` with SYNC's default set to ``sync`` (one of SYNCS), compiled from a
    patched copy of this file (Triton reads a kernel's source from its file)."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from patched import load_patched

    if sync not in SYNCS:
        raise ValueError(f"variant_kernel: sync must be one of {SYNCS} (got {sync!r})")
    old = "SYNC: tl.constexpr = " + '"all",'  # the signature's (not this line's)
    new = f'SYNC: tl.constexpr = "{sync}",'
    return load_patched(__file__, [(old, new)], f"wide_split_{sync}").wide_split_kernel


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
    SYNC: tl.constexpr = "all",  # the wait: see SYNCS (variant_kernel sets it)
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
        target = seen - seen % C + C
        if SYNC == "all" or not SPIN_ASM:
            parts = forward_split._split_parts(PART, COUNT, row, target, C, C_POW2, ACC, SPIN_ASM)
        elif SYNC == "lane0":
            tl.inline_asm_elementwise(
                _LANE0_SPIN, "=l,l,l", [(COUNT + row).to(tl.int64, bitcast=True), target],
                dtype=tl.int64, is_pure=False, pack=1,
            )  # fmt: skip
            k = tl.arange(0, C_POW2)
            addr = (PART + row * C_POW2 + k).to(tl.int64, bitcast=True)
            parts = tl.inline_asm_elementwise(
                forward_split._SPLIT_LOAD_PART32,
                "=r,l",
                [addr],
                dtype=tl.float32,
                is_pure=False,
                pack=1,
            )
            parts = tl.where(k < C, parts, 0.0)
        else:  # "none": no wait, this chunk's sum alone (wrong values: timing only)
            parts = tl.zeros([C_POW2], dtype=ACC) + tl.sum(xf * xf, axis=0)
        rstd = 1.0 / tl.sqrt(tl.sum(parts, axis=0) / N + eps)
        if X.dtype.element_ty == tl.float32:
            y = x16 * rstd
        else:
            y = common._widen_by_bits(x16) * rstd
        if HAS_WEIGHT:
            w = tl.load(W + cols * stride_w + row * stride_res, mask=mask, other=0.0)
            y = y * w.to(ACC)
        tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=mask)
        if STORE_RSTD:
            tl.store(RSTD + row, rstd, mask=chunk == 0)


#: ``word_split_kernel``'s publication: thread 0 of the program stores the row's slot word
#: (epoch in the high half, the partial's float32 bits in the low half) as one relaxed 64-bit
#: store: single-copy atomic, so a partner that sees the new epoch sees the partial with it.
_WORD_STORE = tl.constexpr("""{
.reg .pred %p;
.reg .b32 %t;
mov.u32 %t, %tid.x;
setp.eq.u32 %p, %t, 0;
@%p st.relaxed.gpu.global.b64 [$1], $2;
mov.b64 $0, 0;
}""")
#: The wait: spin on a slot until its epoch (high half) is ``$2``; returns the word.
_WORD_SPIN = tl.constexpr("""{
.reg .pred %p;
.reg .b64 %e;
WORD_SPIN:
ld.relaxed.gpu.global.b64 $0, [$1];
shr.u64 %e, $0, 32;
setp.ne.u64 %p, %e, $2;
@%p bra WORD_SPIN;
}""")
_WORD_LOAD = tl.constexpr("ld.relaxed.gpu.global.b64 $0, [$1];")


@triton.jit(do_not_specialize=["M"])
def word_split_kernel(
    X, W, Y, RSTD, SLOTS, stride_x, stride_w, w_row, M, N, eps,
    BLOCK: tl.constexpr, C: tl.constexpr, C_POW2: tl.constexpr, ASM: tl.constexpr,
    AHEAD: tl.constexpr,  # load the next step's chunk before this step's wait (two in registers)
):  # fmt: skip
    """The wide split's plain schedule with no counters, atomics or fences: each (row, chunk) has
    one int64 slot word in SLOTS (M, C_POW2), never reset. Each launch writes every slot of each
    of its rows exactly once, so before a launch a row's C slots share one epoch e; the program
    of (row, chunk) reads its own slot's e, stores (e + 1, partial) in one word, and spins on the
    row's C slots until each shows e + 1 (the data is the flag: no release/acquire, so the
    publication does not wait for the program's earlier y stores to drain). Epochs wrap at 2**32
    (compared for equality). float32 accumulation only. ``ASM`` False: the interpreter's plain
    loads and stores (programs run one after another: C = 1). ``w_row`` is 0 at run time: the
    weight's address depends on the row, so the compiler cannot hoist (and hold) it."""
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    chunk = pid % C
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    k = tl.arange(0, C_POW2)
    tasks = M * C
    if AHEAD:  # the first step's chunk, loaded before the walk
        x_next = tl.load(X + tl.cast(pid // C, tl.int64) * stride_x + cols, mask=mask, other=0.0)
    else:
        x_next = tl.zeros([BLOCK], dtype=X.dtype.element_ty)  # unused
    for t in tl.range(pid, tasks, g, num_stages=1):
        row = tl.cast(t // C, tl.int64)
        own = SLOTS + row * C_POW2 + chunk
        if ASM:  # issued first: its latency hides behind the chunk's load
            old = tl.inline_asm_elementwise(
                _WORD_LOAD, "=l,l", [own.to(tl.int64, bitcast=True)], dtype=tl.int64,
                is_pure=False, pack=1,
            )  # fmt: skip
        else:
            old = tl.load(own)
        if AHEAD:  # this step's chunk came a step ago; the next one's load goes on through the wait
            x16 = x_next
            nxt = tl.cast(tl.minimum(t + g, tasks - 1) // C, tl.int64)  # past the end: reloaded
            x_next = tl.load(X + nxt * stride_x + cols, mask=mask, other=0.0)
        else:
            x16 = tl.load(X + row * stride_x + cols, mask=mask, other=0.0)
        xf = x16.to(tl.float32)
        s = tl.sum(xf * xf, axis=0)
        bits = s.to(tl.uint32, bitcast=True).to(tl.uint64).to(tl.int64, bitcast=True)
        epoch = ((old >> 32) + 1) & 0xFFFFFFFF
        # the slots past C (k >= C) stand in for chunk k % C: real, and at the same epoch
        slots = SLOTS + row * C_POW2 + k % C
        if ASM:
            tl.inline_asm_elementwise(
                _WORD_STORE, "=l,l,l", [own.to(tl.int64, bitcast=True), (epoch << 32) | bits],
                dtype=tl.int64, is_pure=False, pack=1,
            )  # fmt: skip
            words = tl.inline_asm_elementwise(
                _WORD_SPIN, "=l,l,l", [slots.to(tl.int64, bitcast=True), epoch + k * 0],
                dtype=tl.int64, is_pure=False, pack=1,
            )  # fmt: skip
        else:
            tl.store(own, (epoch << 32) | bits)
            words = tl.load(slots)
        low = (words & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
        parts = tl.where(k < C, low, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(parts, axis=0) / N + eps)
        if X.dtype.element_ty == tl.float32:
            y = x16 * rstd
        else:
            y = common._widen_by_bits(x16) * rstd
        w = tl.load(W + cols * stride_w + row * w_row, mask=mask, other=0.0)  # w_row: 0
        tl.store(Y + row * N + cols, (y * w.to(tl.float32)).to(Y.dtype.element_ty), mask=mask)
        tl.store(RSTD + row, rstd, mask=chunk == 0)


#: Slot words per (device, C): never reset (see word_split_kernel); grown with M (zeros: every
#: row's slots at epoch 0). One stream only (an experiment).
_SLOTS: dict = {}


def word_forward(x, w, eps, block, num_warps, per_sm=1, ahead=False):
    """x: (M, N) 16-bit or float32 rows, unit column stride; w: (N,). Returns (y, rstd) through
    word_split_kernel, C = ceil(N / block) programs a row, a cooperative persistent grid."""
    import torch

    m, n = x.shape
    c = -(-n // block)
    c_pow2 = 1 << (c - 1).bit_length()
    key = (x.device, c)
    slots = _SLOTS.get(key)
    if slots is None or slots.numel() < m * c_pow2:
        slots = _SLOTS[key] = torch.zeros(m * c_pow2, device=x.device, dtype=torch.int64)
    y = torch.empty_like(x)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        g = max(c, min(m * c, sms * per_sm) // c * c)
        kwargs = {"launch_cooperative_grid": True}
    else:
        g, kwargs = c, {}
    word_split_kernel[(g,)](
        x, w, y, rstd, slots, x.stride(0), w.stride(0), 0, m, n, eps,
        BLOCK=block, C=c, C_POW2=c_pow2, ASM=x.is_cuda, AHEAD=ahead, num_warps=num_warps,
        **kwargs,
    )  # fmt: skip
    return y, rstd

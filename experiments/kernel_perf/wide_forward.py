"""Forward variants for rows wider than the register file holds (N >= 32768), timed by tune.py
part ``widefwd`` beside the package's kernel. Not used by the package.

The package walks such a row twice in chunks (sum of squares, then scale), one row per program:
the second read should come from L2. These variants ask whether cache hints or the chunk order
make it so (bf16, weight, no residual):
- ``HINTS``: pass 1 loads with ``evict_last`` (keep the row in L2 for pass 2), pass 2 loads with
  ``evict_first`` and stores y streaming (``.cs``), so y's lines do not push rows out of L2.
- ``REVERSE``: pass 2 walks the chunks last to first: the chunks read last in pass 1 are the
  likeliest still cached.
- ``STAGES``: pass 1's chunk loop software-pipelined (the next chunks' loads in flight while one
  is summed), for more bytes in flight per SM than one 1024-thread program keeps.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import rmsnorm_kernel  # noqa: F401  (picks the interpreter on a machine without CUDA)


@triton.jit
def wide_forward_kernel(
    X,
    W,
    Y,
    RSTD,
    N,
    eps,
    BLOCK: tl.constexpr,
    PASS1_EVICT: tl.constexpr,  # "" (no hint) or "evict_last"
    PASS2_EVICT: tl.constexpr,  # "" or "evict_first"
    STORE_CACHE: tl.constexpr,  # "" or ".cs" (streaming)
    REVERSE: tl.constexpr,
    STAGES: tl.constexpr,  # software pipelining of pass 1's chunk loop (1: none)
):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * N
    y_row = Y + row * N
    cols = tl.arange(0, BLOCK)
    sum_sq = tl.zeros([BLOCK], dtype=tl.float32)
    for start in tl.range(0, N, BLOCK, num_stages=STAGES):
        c = start + cols
        mask = c < N
        x = tl.load(x_row + c, mask=mask, other=0.0, eviction_policy=PASS1_EVICT).to(tl.float32)
        sum_sq += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(sum_sq, axis=0) / N + eps)
    chunks = tl.cdiv(N, BLOCK)
    for i in range(0, chunks):
        if REVERSE:
            start = (chunks - 1 - i) * BLOCK
        else:
            start = i * BLOCK
        c = start + cols
        mask = c < N
        x = tl.load(x_row + c, mask=mask, other=0.0, eviction_policy=PASS2_EVICT)
        y = x.to(tl.float32) * rstd * tl.load(W + c, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + c, y.to(Y.dtype.element_ty), mask=mask, cache_modifier=STORE_CACHE)
    tl.store(RSTD + row, rstd)


def launch(x, w, eps, block, warps, hints, reverse, stages=1):
    """``(y, rstd)`` of contiguous ``x (M, N)`` with weight ``w (N,)``."""
    m, n = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty((m,), device=x.device, dtype=torch.float32)
    wide_forward_kernel[(m,)](
        x,
        w,
        y,
        rstd,
        n,
        eps,
        BLOCK=block,
        PASS1_EVICT="evict_last" if hints else "",
        PASS2_EVICT="evict_first" if hints else "",
        STORE_CACHE=".cs" if hints else "",
        REVERSE=reverse,
        STAGES=stages,
        num_warps=warps,
    )
    return y, rstd


@triton.jit
def _split_row(X, Y, RSTD, PART, COUNT, row, part, cols, mask, w, N, eps, SPLIT: tl.constexpr):
    """Slice ``part`` of row ``row`` (int64): store its sum of squares, take a ticket (an integer
    atomic, release), wait until the row's SPLIT tickets of this launch are in (acquire), add the
    SPLIT partials in index order (every program the same order: the same rstd), then scale the
    slice still in registers and store it. x is read once, never twice."""
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(PART + row * SPLIT + part, tl.sum(x * x, axis=0))
    tl.debug_barrier()  # the partial's store happens before the release below
    ticket = tl.atomic_add(COUNT + row, 1, sem="acq_rel", scope="gpu")
    target = (ticket // SPLIT + 1) * SPLIT  # this launch's last ticket + 1
    seen = ticket + 1
    while seen < target:
        seen = tl.atomic_add(COUNT + row, 0, sem="acquire", scope="gpu")
    parts = tl.load(PART + row * SPLIT + tl.arange(0, SPLIT), cache_modifier=".cg")
    rstd = 1.0 / tl.sqrt(tl.sum(parts, axis=0) / N + eps)
    tl.store(Y + row * N + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
    if part == 0:
        tl.store(RSTD + row, rstd)


@triton.jit
def split_row_forward_kernel(
    X,
    W,
    Y,
    RSTD,
    PART,  # (M, SPLIT) float32: each slice's sum of squares
    COUNT,  # (M,) int32 tickets, never reset: each launch adds SPLIT per row
    N,
    eps,
    SPLIT: tl.constexpr,  # programs per row
    BLOCK: tl.constexpr,  # columns per program (SPLIT * BLOCK >= N)
):
    """One row over SPLIT cooperating programs (``_split_row``), one program per slice.

    Relies on the row's programs (consecutive program ids) running concurrently: true of the
    in-order dispatch of NVIDIA GPUs with at least SPLIT programs resident, not a CUDA guarantee
    (it hung on the H200 at 16 programs of 4096 columns per row), and never true in Triton's
    interpreter (one program at a time) unless SPLIT == 1.
    """
    pid = tl.program_id(0)
    part = pid % SPLIT
    cols = part * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    row = (pid // SPLIT).to(tl.int64)
    _split_row(X, Y, RSTD, PART, COUNT, row, part, cols, mask, w, N, eps, SPLIT)


@triton.jit
def split_row_coop_kernel(
    X,
    W,
    Y,
    RSTD,
    PART,  # (M, SPLIT) float32: each slice's sum of squares
    COUNT,  # (M,) int32 tickets, never reset: each launch adds SPLIT per row
    M,
    N,
    eps,
    SPLIT: tl.constexpr,  # programs per row
    BLOCK: tl.constexpr,  # columns per program (SPLIT * BLOCK >= N)
):
    """The split-row forward made safe: a persistent grid launched cooperatively
    (``launch_cooperative_grid=True``: CUDA runs every program at once, or refuses the launch),
    so a program waiting on its row's partners waits on programs that are running. Program
    (group g, slice s) handles slice s of rows g, g + G, g + 2G, ... (G groups); the SPLIT programs
    of a group meet once per row. The weight slice is loaded once per program."""
    pid = tl.program_id(0)
    groups = tl.num_programs(0) // SPLIT
    part = pid % SPLIT
    cols = part * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range((pid // SPLIT).to(tl.int64), M, groups):
        _split_row(X, Y, RSTD, PART, COUNT, row, part, cols, mask, w, N, eps, SPLIT)


#: Ticket counters per (device, M, SPLIT), allocated once: a memset per launch would cost a
#: launch. Keyed by SPLIT too: each launch adds SPLIT per row, and a counter shared between
#: SPLIT values (as it was until the 2026-11-30 sixth session) starts a launch at a count that is
#: not a multiple of its SPLIT, so the tickets fall into the wrong groups: some programs wait for
#: tickets no program of the launch will take (a hang) or read partials not yet stored.
_COUNTS: dict = {}


def _split_buffers(x, split):
    """``(y, rstd, partials, counters, block)`` for ``x (M, N)`` over ``split`` slices."""
    m, n = x.shape
    key = (x.device, m, split)
    if key not in _COUNTS:
        _COUNTS[key] = torch.zeros(m, device=x.device, dtype=torch.int32)
    y = torch.empty_like(x)
    rstd = torch.empty((m,), device=x.device, dtype=torch.float32)
    part = torch.empty((m, split), device=x.device, dtype=torch.float32)
    return y, rstd, part, _COUNTS[key], triton.next_power_of_2(triton.cdiv(n, split))


def launch_split(x, w, eps, split, warps):
    """``(y, rstd)`` of contiguous ``x (M, N)`` over ``split`` programs per row."""
    m, n = x.shape
    y, rstd, part, counts, block = _split_buffers(x, split)
    split_row_forward_kernel[(m * split,)](
        x, w, y, rstd, part, counts, n, eps, SPLIT=split, BLOCK=block, num_warps=warps
    )
    return y, rstd


def launch_split_coop(x, w, eps, split, warps, per_sm):
    """``(y, rstd)`` of contiguous ``x (M, N)``: ``split`` programs per row, ``per_sm`` programs
    per SM in all (a cooperative launch fails rather than over-subscribe the GPU)."""
    m, n = x.shape
    y, rstd, part, counts, block = _split_buffers(x, split)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
    groups = max(1, min(m, sms * per_sm // split))
    kwargs = dict(num_warps=warps)
    if x.is_cuda:  # the interpreter runs programs one at a time: only split == 1 finishes there
        kwargs["launch_cooperative_grid"] = True
    split_row_coop_kernel[(groups * split,)](
        x, w, y, rstd, part, counts, m, n, eps, SPLIT=split, BLOCK=block, **kwargs
    )
    return y, rstd

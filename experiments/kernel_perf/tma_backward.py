"""A backward whose row loads and dx stores go through tensor descriptors (TMA on Hopper), timed by
tune.py part ``tmabwd`` beside the package's backward. The package's own
``rmsnorm_backward_tma_kernel`` (every backward feature, chosen by ``config.BWD_TMA``) grew out of
this one after that sweep; this file stays as the sweep's record.

Why: at 65536 x 1024 bf16 the package's backward takes ~121-127 us whatever its tile, warps,
grid or pipelining depth (tune.py parts pipe, rowsbwd, narrow), against quack's ~109 us, and
quack feeds its rows through asynchronous copies into shared memory. Triton's pointer loads in a
pipelined ``tl.range`` become ``cp.async`` (one instruction per 16 bytes per thread); a tensor
descriptor's load is one bulk copy per tile, issued by one thread, that frees the other threads'
issue slots and registers for the math.

The kernel: a persistent grid, program ``p`` owns rows ``[p * RPP, (p + 1) * RPP)`` (``RPP`` a
multiple of ``R``: a tile never straddles two programs, so its clipped store never writes another
program's rows), ``R`` rows per step, the whole row in the tile. A TMA box is at most 256 values
per dimension, so rows are viewed as ``(M, N / CHUNK, CHUNK)`` with ``CHUNK = min(N, 256)``
(N a multiple of it, and rows 16-byte aligned: what a descriptor needs) and a tile is
``(R, N / CHUNK, CHUNK)``, reshaped to ``(R, N)``. Weight, no dh, F.rms_norm's rounding. Each
program stores a float32 dweight partial; ``part.sum(0)`` finishes it (a fixed order: bitwise
repeatable), inside the timed call.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import rmsnorm_kernel  # noqa: F401  (picks the interpreter on a machine without CUDA)
from rmsnorm_kernel.config import sm_count

#: Widest TMA box dimension (CUDA's cuTensorMapEncodeTiled limit).
MAX_BOX = 256


@triton.jit
def tma_backward_kernel(
    DY_DESC,  # (M, N / CHUNK, CHUNK) descriptor of dy, box (R, N / CHUNK, CHUNK)
    X_DESC,  # the same for x
    DX_DESC,  # the same for dx (x's dtype)
    W,  # (N,) contiguous
    RSTD,  # (M,) float32
    PART,  # (programs, N) float32 dweight partials
    M,
    N,
    rows_per_program,  # a multiple of R
    BLOCK: tl.constexpr,  # == N (N = CHUNKS * CHUNK)
    CHUNKS: tl.constexpr,
    CHUNK: tl.constexpr,
    R: tl.constexpr,  # rows per step
    STAGES: tl.constexpr,  # software pipelining of the step loop
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    w = tl.load(W + cols).to(tl.float32)
    dw = tl.zeros([R, BLOCK], dtype=tl.float32)
    start = pid * rows_per_program
    end = tl.minimum(start + rows_per_program, M)
    for r in tl.range(start, end, R, num_stages=STAGES):
        x_raw = tl.reshape(X_DESC.load([r, 0, 0]), [R, BLOCK])  # x's dtype (dx's)
        x = x_raw.to(tl.float32)
        dy = tl.reshape(DY_DESC.load([r, 0, 0]), [R, BLOCK]).to(tl.float32)
        rows = r + tl.arange(0, R)
        rstd = tl.load(RSTD + rows, mask=rows < end, other=0.0)  # rows past M: x = 0, rstd = 0
        u = dy * w[None, :]
        mean_ux = tl.sum(u * x, axis=1) / N  # / N, never / BLOCK (here BLOCK == N anyway)
        dx = (u - x * (rstd * rstd * mean_ux)[:, None]) * rstd[:, None]
        DX_DESC.store([r, 0, 0], tl.reshape(dx.to(x_raw.dtype), [R, CHUNKS, CHUNK]))
        dw += dy * x * rstd[:, None]
    tl.store(PART + pid.to(tl.int64) * N + cols, tl.sum(dw, axis=0))


def _desc(t, r, chunks, chunk):
    m = t.shape[0]
    return TensorDescriptor(t, (m, chunks, chunk), (t.stride(0), chunk, 1), (r, chunks, chunk))


def supported(x, dy) -> bool:
    """Whether :func:`launch` can take these rows (contiguous, N a power of two from 16 to 16384
    and a multiple of the box width; float32 or 16-bit)."""
    n = x.shape[1]
    return (
        x.is_contiguous()
        and dy.is_contiguous()
        and 16 <= n <= 16384
        and n & (n - 1) == 0
        and x.dtype in (torch.float32, torch.float16, torch.bfloat16)
    )


def launch(dy, x, w, rstd, rows, warps, stages, per_sm):
    """``(dx, dweight)`` of contiguous ``x, dy (M, N)`` (:func:`supported`), weight ``w (N,)``
    and the forward's ``rstd (M,)`` float32: ``rows`` rows per step, ``per_sm`` programs per SM
    (the interpreter: 3 programs)."""
    if not supported(x, dy):
        raise ValueError(f"tma_backward: unsupported rows {tuple(x.shape)} {x.dtype}")
    m, n = x.shape
    chunk = min(n, MAX_BOX)
    chunks = n // chunk
    if x.is_cuda:
        sms = sm_count(x.device.index)
        programs = sms * per_sm
    else:
        programs = 3
    rpp = triton.cdiv(triton.cdiv(m, programs), rows) * rows  # a multiple of rows
    programs = triton.cdiv(m, rpp)
    dx = torch.empty_like(x)
    part = torch.empty((programs, n), device=x.device, dtype=torch.float32)
    tma_backward_kernel[(programs,)](
        _desc(dy, rows, chunks, chunk),
        _desc(x, rows, chunks, chunk),
        _desc(dx, rows, chunks, chunk),
        w,
        rstd,
        part,
        m,
        n,
        rpp,
        BLOCK=n,
        CHUNKS=chunks,
        CHUNK=chunk,
        R=rows,
        STAGES=stages,
        num_warps=warps,
    )
    return dx, part.sum(0).to(w.dtype)

"""One-pass forward of wide 16-bit rows kept packed in registers, for tune.py part ``packed``.

At 65536 columns the package walks a row twice (sum of squares, then scale), re-reading it from
L2 (``kernels.rmsnorm_forward_kernel``, ``LOOP_BLOCK`` chunks): 70% of copy against quack's 97%
(bench, 2026-12-01). The sixth session's ``widefwd`` found cache hints and a reversed second pass
worth 5% (L2 residency between the passes matters: every program in flight keeps a 128 KB row
there), and the one-pass kernel measured no better, but that one converts the row to float32 on
load: 64 float32 values per thread at 32 warps, 136 bytes spilled (``compile_check.py``).

Here the row stays in its 16-bit dtype (two values per register: 32 registers per thread for
65536 columns at 32 warps), is read from DRAM once, and is widened twice: for the sum of squares
with a cast, and for the output through its bits (bfloat16 is float32's top half: a 16-bit
shift). Two different expressions, so the compiler cannot merge them into one float32 copy of the
row kept live across the reduction (``BITS=False`` casts twice, which it does merge). Compiled
for sm_90 with Triton 3.9 (``compile_check.py``'s ``compile_one``), registers per thread, spilled
bytes:

| N, warps | package one-pass | packed, cast twice | packed, bits |
|---|---|---|---|
| 65536, 32 | 64, 136 spilled | 64, 96 spilled | 53, none |
| 16384, 8 | 127 | 115 | 66 |
| 8192, 4 | 128 | 92 | 66 |

Fewer registers let more one-row programs share an SM (8192 columns at 4 warps: 7 instead of 4).
float16 has no exact shift: ``BITS`` is for bfloat16 only. Values: the oracle's within the
dtype's rounding; the two widenings give the same bits (``BITS`` changes no value). The reduction
is one ``tl.sum`` over the row, which the package's chunked wide-row pass does in another order.
``EARLY_W``: the weight loaded with the row (the package's order up to 8192 columns) or after the
reduction (its order above).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import rmsnorm_kernel  # noqa: F401  (picks the interpreter on a machine without CUDA)


@triton.jit
def packed_forward_kernel(
    X,  # (M, N) 16-bit rows, contiguous
    W,  # (N,) weight, contiguous
    Y,  # (M, N) output, contiguous, X's dtype
    RSTD,  # (M,) float32 inverse RMS
    N,
    eps,
    BLOCK: tl.constexpr,  # >= N, a power of two: the whole row in registers
    BITS: tl.constexpr,  # widen bfloat16 through its bits for the output (else a second cast)
    EARLY_W: tl.constexpr,  # load the weight with the row (else after the reduction)
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0)  # stays 16-bit
    if EARLY_W:
        w = tl.load(W + cols, mask=mask, other=0.0)
    else:
        w = tl.zeros([BLOCK], dtype=W.dtype.element_ty)  # loaded below
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / N + eps)
    if BITS:
        wide = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        wide = x.to(tl.float32)
    if not EARLY_W:
        w = tl.load(W + cols, mask=mask, other=0.0)
    y = wide * rstd * w.to(tl.float32)
    tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + row, rstd)


def launch(
    x: torch.Tensor, w: torch.Tensor, eps: float, warps: int, bits: bool = True, early_w=False
):
    """``x (M, N)`` contiguous float16 / bfloat16 (``bits`` needs bfloat16), ``w (N,)``
    contiguous -> ``(y (M, N), rstd (M,))``, one program of ``warps`` warps per row."""
    m, n = x.shape
    if bits and x.dtype != torch.bfloat16:
        raise ValueError(f"bits=True widens bfloat16 through its bits (got {x.dtype})")
    y = torch.empty_like(x)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    block = triton.next_power_of_2(n)
    packed_forward_kernel[(m,)](
        x, w, y, rstd, n, eps, BLOCK=block, BITS=bits, EARLY_W=early_w, num_warps=warps
    )
    return y, rstd

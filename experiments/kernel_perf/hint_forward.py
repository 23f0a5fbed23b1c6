"""The one-row forward with cache hints on its loads and stores, for tune.py part ``hints``.

The package's one-pass forward (``kernels.rmsnorm_forward_kernel``, weight-first order up to
``WEIGHT_FIRST_MAX_BLOCK`` columns) passes no cache hints. Inductor's generated reductions mark
their loads with eviction policies, and at 8192 columns compile led our forward by ~4% in the
thirteenth session's bench (32768 x 8192 bf16: 251.0 us against 261.9; 8192 x 8192 65.3 against
67.8). x and y are streamed once (evict first); the weight is read by every row (evict last).
This kernel is the package's plain case (weight, no residual, no offset, not Llama's rounding)
in the package's order, with each hint a constexpr, so that part ``hints`` times the hints alone.

With every hint empty it computes the package's values bit for bit (the same float32 math, the
same operations); the hints change no value.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def hint_forward_kernel(
    X,  # (M, N) rows, row stride stride_x, unit column stride
    W,  # (N,) weight, contiguous
    Y,  # (M, N) output, contiguous
    RSTD,  # (M,) float32 inverse RMS
    stride_x,
    N,
    eps,
    BLOCK: tl.constexpr,  # >= N, a power of two: the whole row in registers
    X_EVICT: tl.constexpr,  # eviction policy of the row's load: "", "evict_first", "evict_last"
    W_EVICT: tl.constexpr,  # the same for the weight's load
    Y_CACHE: tl.constexpr,  # cache modifier of the output's store: "", ".cs" (streaming), ".cg"
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0, eviction_policy=X_EVICT)
    x = x.to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0, eviction_policy=W_EVICT)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(RSTD + row, rstd)
    y = x * rstd * w.to(tl.float32)
    tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=mask, cache_modifier=Y_CACHE)


def launch(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    warps: int,
    x_evict: str = "",
    w_evict: str = "",
    y_cache: str = "",
):
    """``x (M, N)`` unit column stride, N <= 32768, ``w (N,)`` contiguous -> ``(y (M, N), rstd
    (M,))``, one program of ``warps`` warps per row, with the given hints."""
    m, n = x.shape
    block = triton.next_power_of_2(n)
    y = torch.empty_like(x)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    hint_forward_kernel[(m,)](
        x,
        w,
        y,
        rstd,
        x.stride(0),
        n,
        eps,
        BLOCK=block,
        X_EVICT=x_evict,
        W_EVICT=w_evict,
        Y_CACHE=y_cache,
        num_warps=warps,
    )
    return y, rstd

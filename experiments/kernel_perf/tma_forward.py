"""A persistent forward whose loads and stores go through tensor descriptors (TMA), timed by
tune.py part ``tmafwd`` beside the package's kernel. Not used by the package.

The package's forward for 1024 < N <= 32768 launches one program per row; at 4096 columns it
reaches 3.64-3.97 TB/s where Liger and quack reach 3.86-4.14 (bench 2026-12-01b: 4096 x 4096
bf16 18.4 us vs quack 17.4, 16384 x 4096 67.6 vs 64.9). A persistent pointer loop with software
pipelining lost to it (part ``persistfwd``, ``persistent_forward.py``). The backward gained
2-22% from the same loop once its tiles moved through descriptors (``BWD_TMA``): one bulk copy
per tile issued by one thread, instead of a ``cp.async`` per 16 bytes per thread. This is that
loop for the forward: ``per_sm`` programs per SM walk tiles of ``ROWS`` rows, ``pid, pid + G,
...``, with ``tl.range(num_stages=STAGES)`` keeping the next tiles' copies in flight.

Rows are ``N`` values, ``N`` a power of two (a descriptor's box is exact), viewed as ``(M, N /
chunk, chunk)`` as the TMA backward does (``ops._rows_desc``). A tile past M reads zeros and its
store is clipped by the descriptor; its rstd store is masked.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import rmsnorm_kernel  # noqa: F401  (picks the interpreter on a machine without CUDA)
from rmsnorm_kernel.config import TMA_CHUNK, sm_count
from rmsnorm_kernel.ops import _rows_desc

#: Programs of the interpreter (no SMs): 3, so CPU checks cover a strided tile loop.
INTERPRETER_PROGRAMS = 3


@triton.jit(do_not_specialize=["M"])
def tma_forward_kernel(
    X_DESC,  # descriptor of x viewed as (M, CHUNKS, CHUNK), box (ROWS, CHUNKS, CHUNK)
    Y_DESC,  # the same for y (contiguous, x's dtype)
    W,  # pointer to the weight (N,), unit stride
    RSTD,  # pointer to the inverse RMS per row (M,), float32
    M,
    N,  # == BLOCK
    eps,
    BLOCK: tl.constexpr,
    CHUNKS: tl.constexpr,
    CHUNK: tl.constexpr,
    ROWS: tl.constexpr,
    STAGES: tl.constexpr,
    STORE_RSTD: tl.constexpr = True,  # False: inference (the bench's forward), RSTD unused
):
    cols = tl.arange(0, BLOCK)
    w = tl.load(W + cols).to(tl.float32)
    step = tl.num_programs(0) * ROWS
    for first in tl.range(tl.program_id(0) * ROWS, M, step, num_stages=STAGES):
        x = tl.reshape(X_DESC.load([first, 0, 0]), [ROWS, BLOCK]).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)  # / N, the data width
        y = x * rstd[:, None] * w[None, :]
        Y_DESC.store([first, 0, 0], tl.reshape(y.to(Y_DESC.dtype), [ROWS, CHUNKS, CHUNK]))
        if STORE_RSTD:
            rows = first + tl.arange(0, ROWS)
            tl.store(RSTD + rows, rstd, mask=rows < M)


def launch(x, w, eps, rows, warps, stages, per_sm, store_rstd=True):
    """``(y, rstd)`` of contiguous ``x (M, N)`` (N a power of two, 16-bit or float32) with a
    contiguous weight ``w (N,)``: ``per_sm`` programs per SM, tiles of ``rows`` rows;
    ``store_rstd=False``: rstd is left unwritten (inference)."""
    m, n = x.shape
    if n & (n - 1) or not x.is_contiguous() or not w.is_contiguous():
        raise ValueError("tma_forward: x contiguous with a power-of-two width, w contiguous")
    y = torch.empty_like(x)
    rstd = torch.empty((m,), device=x.device, dtype=torch.float32)
    chunk = min(n, TMA_CHUNK)
    tiles = triton.cdiv(m, rows)
    if x.is_cuda:
        grid = max(1, min(tiles, sm_count(x.device.index) * per_sm))
    else:
        grid = min(tiles, INTERPRETER_PROGRAMS)
    tma_forward_kernel[(grid,)](
        _rows_desc(x, m, n, rows),
        _rows_desc(y, m, n, rows),
        w,
        rstd,
        m,
        n,
        eps,
        BLOCK=n,
        CHUNKS=n // chunk,
        CHUNK=chunk,
        ROWS=rows,
        STAGES=stages,
        STORE_RSTD=store_rstd,
        num_warps=warps,
    )
    return y, rstd


if __name__ == "__main__":  # a CPU (interpreter) or GPU check against the float64 oracle
    import yaml

    from rmsnorm_kernel.paths import CONFIG_DIR
    from rmsnorm_kernel.reference import rmsnorm_reference

    # The project's tolerances (conf/campaign/default.yaml), as every kernel test uses them.
    with open(CONFIG_DIR / "campaign" / "default.yaml") as f:
        tolerances = yaml.safe_load(f)["tolerances"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for m, n, dtype, rows in ((7, 256, torch.float32, 2), (5, 1024, torch.bfloat16, 1)):
        torch.manual_seed(0)
        x = torch.randn(m, n, device=device, dtype=dtype)
        w = torch.randn(n, device=device, dtype=dtype)
        y, rstd = launch(x, w, 1e-6, rows, 4, 2, 1)
        tol = {k: float(v) for k, v in tolerances[str(dtype).removeprefix("torch.")].items()}
        ref = rmsnorm_reference(x.double(), w.double(), 1e-6)
        torch.testing.assert_close(y.double(), ref, **tol)
        r_ref = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
        torch.testing.assert_close(rstd.double(), r_ref, atol=0.0, rtol=1e-6)
        print(f"{m}x{n} {dtype} rows={rows}: y and rstd within the oracle's tolerances")

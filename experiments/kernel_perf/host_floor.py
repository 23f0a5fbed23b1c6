"""Host cost of fwd + ``autograd.grad`` at the bench's shapes: ours, F.rms_norm and the floor of
any Python autograd node (an empty ``autograd.Function`` that allocates our outputs and launches
nothing), the kernels each of our calls launches, a cProfile of ours per shape; then ours with
the heuristic's TMA backward switched off, alternating in the same process. Run on a GPU box:

    PYTHONPATH=src python3 experiments/kernel_perf/host_floor.py

(``loop host``: µs a call of a loop the GPU never holds back at small shapes; at large ones the
queue fills and it is the GPU's time, as ``incl. sync`` is.) Forty-sixth session's run:
``experiments/h200/results_2026-12-06f/h100_suite_kernel/host_shape.log``.
"""

import cProfile
import pstats
import time

import torch
import torch.nn.functional as F

import rmsnorm_kernel as rk
from rmsnorm_kernel import ops


def timeit(f, k=400):
    for _ in range(30):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(k):
        f()
    t_host = (time.perf_counter() - t) / k * 1e6
    torch.cuda.synchronize()
    t_all = (time.perf_counter() - t) / k * 1e6
    return t_host, t_all


class Floor(torch.autograd.Function):
    """The floor of a Python autograd.Function: our outputs allocated, nothing launched."""

    @staticmethod
    def forward(ctx, x, w):
        y = torch.empty_like(x)
        r = torch.empty(x.shape[0], device=x.device)
        ctx.save_for_backward(x, w, r)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, r = ctx.saved_tensors
        return torch.empty_like(dy), torch.empty_like(w)


def cached_kernels():
    return {k: v for k, v in vars(ops).items() if isinstance(getattr(v, "launches", None), dict)}


SHAPES = [(128, 257, torch.float32), (16384, 4096, torch.bfloat16), (16384, 4096, torch.float16)]
SHAPES += [(65536, 1024, torch.bfloat16), (1024, 4096, torch.bfloat16)]
TMA_SHAPES = [(16384, 4096, torch.bfloat16), (65536, 1024, torch.bfloat16)]
TMA_SHAPES += [(4096, 4096, torch.bfloat16)]


def tensors(m, n, dt):
    x = torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True)
    w = torch.ones(n, device="cuda", dtype=dt, requires_grad=True)
    return x, w, torch.randn(m, n, device="cuda", dtype=dt)


def fwd_grad(f, x, w, dy):
    """One fwd + autograd.grad of ``f(x, w)`` as a no-argument call."""
    return lambda: torch.autograd.grad(f(x, w), (x, w), dy)


def ours(x, w):
    return rk.rmsnorm(x, w, 1e-6)


def native(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def shape_rows(m, n, dt):
    x, w, dy = tensors(m, n, dt)
    for name, f in (("ours", ours), ("native", native), ("floor", Floor.apply)):
        h, a = timeit(fwd_grad(f, x, w, dy))
        print(f"{m}x{n} {dt} {name:6s} fwd+grad: loop host {h:7.1f} us  incl. sync {a:7.1f} us")
    before = {k: dict(v.launches) for k, v in cached_kernels().items()}
    fwd_grad(ours, x, w, dy)()
    torch.cuda.synchronize()
    print("  launches:", [k for k, v in cached_kernels().items() if v.launches != before[k]])
    call = fwd_grad(ours, x, w, dy)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300):
        call()
    pr.disable()
    torch.cuda.synchronize()
    pstats.Stats(pr).sort_stats("tottime").print_stats(12)


def tma_rows(m, n, dt):
    """The TMA backward's host cost: the heuristic with its TMA plan off, alternating."""
    x, w, dy = tensors(m, n, dt)
    call = fwd_grad(ours, x, w, dy)
    tma_from = ops.tma_from
    try:
        for label, patch in (("tma", tma_from), ("no-tma", lambda n, itemsize: None)) * 2:
            ops.tma_from = patch
            h, a = timeit(call, 300)
            row = f"{m}x{n} {dt} ours {label:6s} fwd+grad"
            print(f"{row}: loop host {h:7.1f} us  incl. sync {a:7.1f} us")
    finally:
        ops.tma_from = tma_from


if __name__ == "__main__":
    for shape in SHAPES:
        shape_rows(*shape)
    for shape in TMA_SHAPES:
        tma_rows(*shape)

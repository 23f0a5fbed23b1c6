"""Where does a call's time go: host (Python + launch) overhead versus GPU kernel time.

    PYTHONPATH=src python experiments/kernel_vs_peers/overhead.py

For every implementation of the peer registry (``rmsnorm_kernel.cli.bench.peers``), forward and
forward+backward: host time per call (a loop with one synchronize at the end) beside the sum of
the CUDA kernel times torch.profiler records for the same calls, and the profile of ours at
16384x4096 bf16. ``make bench`` gives the figures the README quotes; this is the diagnosis.
"""

from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile

from rmsnorm_kernel.cli.bench.peers import build

EPS = 1e-6
SHAPES = [(128, 257, torch.float32), (16384, 4096, torch.bfloat16), (1024, 65536, torch.bfloat16)]


def host_us(fn, iters=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - start) / iters


def gpu_us(fn, iters=20):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    total = sum(
        e.device_time_total
        for e in prof.key_averages()
        if e.device_time_total > 0 and not e.key.startswith("cuda")
    )
    return total / iters, prof


def main() -> None:
    impls = build(["ours", "torch", "compile", "liger", "quack"], EPS)
    for m, n, dtype in SHAPES:
        torch._dynamo.reset()  # one compiled graph per shape, never past the recompile limit
        x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
        w = torch.ones(n, device="cuda", dtype=dtype, requires_grad=True)
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        print(f"--- {m}x{n} {dtype}")
        for name, f in impls.items():
            if isinstance(f, str):
                print(f"{name:>10}: {f}")
                continue

            def fwd(f=f, x=x, w=w):
                with torch.no_grad():
                    f(x, w)

            def fwd_bwd(f=f, x=x, w=w, dy=dy):
                torch.autograd.grad(f(x, w), (x, w), dy)

            try:
                for label, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                    g, prof = gpu_us(fn)
                    print(f"{name:>10} {label:>7}: host {host_us(fn):8.1f} us   gpu {g:8.1f} us")
                    if name == "ours" and m == 16384 and label == "fwd+bwd":
                        print(prof.key_averages().table(sort_by="device_time_total", row_limit=8))
            except Exception as exc:  # a peer failing on a shape is a result
                print(f"{name:>10}: fails: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()

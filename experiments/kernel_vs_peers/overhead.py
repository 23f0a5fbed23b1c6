"""Where does a call's time go: host (Python + launch) overhead versus GPU kernel time.

    python experiments/kernel_vs_peers/overhead.py

Host time: a loop of calls with one synchronize at the end, on a shape whose kernels are tiny, so
the loop measures what the CPU spends per call. GPU time: the sum of CUDA kernel times that
torch.profiler records for the same calls.
"""

# ruff: noqa: B023 -- every closure below runs inside the iteration that defines it
from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile

import rmsnorm_kernel as rk
from rmsnorm_kernel import ops

EPS = 1e-6


def host_us(fn, iters=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t) / iters


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


def main():
    impls = {
        "rmsnorm_kernel": lambda x, w: rk.rmsnorm(x, w, EPS),
        "F.rms_norm": lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS),
    }
    try:
        from liger_kernel.transformers.functional import liger_rms_norm

        impls["liger_kernel"] = lambda x, w: liger_rms_norm(x, w, EPS)
    except ImportError as err:
        print("liger not installed", err)
    try:
        from quack import rmsnorm as quack_rmsnorm

        impls["quack"] = lambda x, w: quack_rmsnorm(x, w, eps=EPS)
    except ImportError as err:
        print("quack not installed", err)
    for m, n, dtype in [
        (128, 257, torch.float32),
        (16384, 4096, torch.bfloat16),
        (1024, 65536, torch.bfloat16),
    ]:
        x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
        w = torch.ones(n, device="cuda", dtype=dtype, requires_grad=True)
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        x2 = x.detach()
        print(f"--- {m}x{n} {dtype}")
        y, rstd = rk.forward_op(x2, w.detach(), EPS)
        raw = {
            "launch_forward": lambda: ops.launch_forward(x2, w, None, EPS, 0.0, dtype),
            "launch_backward": lambda: ops.launch_backward(dy, x2, w, rstd, 0.0, None, dtype),
            "torch.autograd.grad(sum)": lambda: torch.autograd.grad(x.sum(), (x,), dy[0, 0]),
        }
        for name, fn in raw.items():
            print(f"{name:>28}: host {host_us(fn):8.1f} us   gpu {gpu_us(fn)[0]:8.1f} us")
        for name, impl in impls.items():

            def fwd(impl=impl):
                with torch.no_grad():
                    impl(x, w)

            def fwd_bwd(impl=impl):
                x.grad = w.grad = None
                impl(x, w).backward(dy)

            g, prof = gpu_us(fwd_bwd)
            print(
                f"{name + ' fwd':>28}: host {host_us(fwd):8.1f} us   gpu {gpu_us(fwd)[0]:8.1f} us"
            )
            print(f"{name + ' fwd+bwd':>28}: host {host_us(fwd_bwd):8.1f} us   gpu {g:8.1f} us")
            if name == "rmsnorm_kernel" and m == 16384:
                print(prof.key_averages().table(sort_by="device_time_total", row_limit=8))


if __name__ == "__main__":
    main()

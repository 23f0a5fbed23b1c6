"""Where the host cost of one eager fwd + ``autograd.grad`` call goes (issue 17: ours is 2.1-2.5x
F.rms_norm's at 128 x 257 fp32). Each row takes one more layer away, so the differences between
rows are the costs of the layers:

- ``ours``: ``rk.rmsnorm`` + ``autograd.grad`` (what the bench's host row times);
- ``function``: ``RMSNormFunction.apply`` directly (no dispatch checks in ``rmsnorm``);
- ``launchers``: ``ops.launch_forward`` + ``ops.launch_backward``, no autograd at all;
- ``forward only``: ``ops.launch_forward`` alone;
- ``empty Function``: a Python ``autograd.Function`` whose forward returns ``x.view_as(x)`` and
  whose backward returns its gradients as they came: the engine's cost of a Python node;
- ``F.rms_norm`` + ``autograd.grad``: the yardstick; ``F.rms_norm`` without grad.

Rounds are interleaved (all rows, then again) so that this host's drift hits every row alike; the
median of ``ROUNDS`` is printed, with the ratio to F.rms_norm's fwd+bwd. Run on a GPU box:

    PYTHONPATH=src python3 experiments/kernel_perf/host_split.py [--json OUT] [--m 128 --n 257]

Without CUDA it runs on the CPU (through Triton's interpreter: the figures then measure the
interpreter, not the launch path; only a smoke test).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import rmsnorm_kernel as rk
from rmsnorm_kernel import ops
from rmsnorm_kernel.function import RMSNormFunction

ROUNDS = 5
EPS = 1e-6


class _EmptyFunction(torch.autograd.Function):
    """The cheapest Python autograd node: what the engine costs us before any of our work."""

    @staticmethod
    def forward(ctx, x, w):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, dy):
        return dy, None


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def host_us(fn, device: str, calls: int) -> float:
    """Microseconds of host time per call: ``calls`` calls, synchronised only at the end."""
    for _ in range(max(2, calls // 40)):
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / calls * 1e6


def variants(x, w, dy) -> dict:
    """Name -> a zero-argument call, for the rows of the module docstring."""
    n = x.shape[-1]
    xd, wd = x.detach(), w.detach()
    _, _, rstd = ops.launch_forward(xd, wd, None, EPS, 0.0, x.dtype)

    def ours():
        torch.autograd.grad(rk.rmsnorm(x, w, EPS), (x, w), dy)

    def function():
        torch.autograd.grad(RMSNormFunction.apply(x, w, EPS, 0.0, None, False), (x, w), dy)

    def launchers():
        ops.launch_forward(xd, wd, None, EPS, 0.0, x.dtype)
        ops.launch_backward(dy, xd, wd, rstd, 0.0, None, x.dtype)

    def forward_only():
        ops.launch_forward(xd, wd, None, EPS, 0.0, x.dtype)

    def empty_function():
        torch.autograd.grad(_EmptyFunction.apply(x, w), (x,), dy)

    def native():
        torch.autograd.grad(F.rms_norm(x, (n,), w, EPS), (x, w), dy)

    def native_forward():
        F.rms_norm(xd, (n,), wd, EPS)

    return {
        "ours": ours,
        "function": function,
        "launchers": launchers,
        "forward only": forward_only,
        "empty Function": empty_function,
        "F.rms_norm fwd+bwd": native,
        "F.rms_norm fwd": native_forward,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--n", type=int, default=257)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    calls = args.calls if device == "cuda" else 4  # the interpreter: a smoke test only
    torch.manual_seed(0)
    x = torch.randn(args.m, args.n, device=device, requires_grad=True)
    w = torch.ones(args.n, device=device, requires_grad=True)
    dy = torch.randn(args.m, args.n, device=device)
    calls_of = variants(x, w, dy)
    times = {name: [] for name in calls_of}
    for _ in range(ROUNDS):
        for name, fn in calls_of.items():
            times[name].append(host_us(fn, device, calls))
    median = {name: statistics.median(ts) for name, ts in times.items()}
    ref = median["F.rms_norm fwd+bwd"]
    print(f"host us per call, {args.m}x{args.n} float32 on {device}, median of {ROUNDS} rounds")
    for name, us in median.items():
        print(f"  {name:20s} {us:8.1f}  ({us / ref:5.2f}x F.rms_norm fwd+bwd)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=device, m=args.m, n=args.n, rounds=times), f, indent=1)


if __name__ == "__main__":
    main()

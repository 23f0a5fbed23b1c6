"""Where the host cost of one eager fwd + ``autograd.grad`` call goes (issue 17: ours is 2.1-2.5x
F.rms_norm's at 128 x 257 fp32). Each row takes one more layer away, so the differences between
rows are the costs of the layers:

- ``ours``: ``rk.rmsnorm`` + ``autograd.grad`` (what the bench's host row times);
- ``function``: ``RMSNormFunction.apply`` directly (no dispatch checks in ``rmsnorm``);
- ``launchers``: ``ops.launch_forward`` + ``ops.launch_backward``, no autograd at all;
- ``forward only``: ``ops.launch_forward`` alone;
- ``allocs``: the five ``torch.empty`` calls of one fwd+bwd (y, rstd, dx, dweight, partials);
- ``one cached launch``: the dweight sum launch alone, through ``launch.CachedKernel``;
- ``empty + launch in bwd`` / ``empty + alloc in bwd``: that node with one cached launch (one
  allocation) in its backward, on autograd's device thread; ``launch, then empty``: the launch on
  the calling thread before the empty node;
- ``empty Function``: a Python ``autograd.Function`` whose forward returns ``x.view_as(x)`` and
  whose backward returns its gradients as they came: the engine's cost of a Python node;
- ``minimal Function``: a Python ``autograd.Function`` calling the two launchers and nothing else;
- ``function fwd only`` / ``minimal fwd only``: those two forwards with grad on, no backward;
- ``launchers (bwd on a 2nd thread)``: the launchers' row with the backward handed to a Python
  worker thread, the caller waiting (autograd's device-thread hop, without autograd);
  ``hop to a 2nd thread``: that hand-off alone;
- ``minimal, side stream`` / ``F.rms_norm, side stream``: those rows on a non-default stream
  (CUDA only);
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
from rmsnorm_kernel import function, launch, ops
from rmsnorm_kernel.function import RMSNormFunction

ROUNDS = 5
_KERNELS = (ops.FORWARD, ops.FORWARD_ROWS, ops.BACKWARD, ops.BACKWARD_ROWS, ops.DW_SUM)
EPS = 1e-6


class _MinimalFunction(torch.autograd.Function):
    """The two launchers under the cheapest Python autograd node (no dispatch, no checks)."""

    @staticmethod
    def forward(ctx, x, w):
        y, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, x.dtype)
        ctx.save_for_backward(x, w, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        return ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype)


def _empty_node(grad_of=lambda dy: dy):
    """The cheapest Python autograd node (forward: a view of x), whose backward returns
    ``grad_of(dy)`` for x: with the identity, what the engine costs us before any of our work;
    with one launch or one allocation in ``grad_of``, what that costs on autograd's device
    thread."""

    class EmptyNode(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, dy):
            return grad_of(dy), None

    return EmptyNode


_EmptyFunction = _empty_node()


class _Worker:
    """A thread that runs one job at a time for the caller, which waits: autograd's hop to its
    device thread, without autograd (does the hop itself cost, or launching on two threads?)."""

    def __init__(self) -> None:
        import queue
        import threading

        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.done = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            self.jobs.get()()
            self.done.set()

    def call(self, job) -> None:
        self.done.clear()
        self.jobs.put(job)
        self.done.wait()


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


def interleaved(calls_of: dict, device: str, calls: int, rounds: int, shape: str) -> dict:
    """Time every row once per round, ``rounds`` times (so drift hits every row alike), print each
    row's median with its ratio to the ``F.rms_norm fwd+bwd`` row; returns name -> per-round us."""
    times = {name: [] for name in calls_of}
    for _ in range(rounds):
        for name, fn in calls_of.items():
            times[name].append(host_us(fn, device, calls))
    median = {name: statistics.median(ts) for name, ts in times.items()}
    ref = median["F.rms_norm fwd+bwd"]
    print(f"host us per call, {shape} on {device}, median of {rounds} interleaved rounds")
    for name, us in median.items():
        print(f"  {name:31s} {us:8.1f}  ({us / ref:5.2f}x F.rms_norm fwd+bwd)")
    return times


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

    m, groups = x.numel() // n, 8

    def allocs():
        torch.empty_like(xd)
        torch.empty((m,), device=x.device, dtype=torch.float32)
        torch.empty_like(dy)
        torch.empty((n,), device=x.device, dtype=w.dtype)
        torch.empty((groups, n), device=x.device, dtype=torch.float32)

    partial = torch.zeros((groups, n), device=x.device, dtype=torch.float32)
    dw_out = torch.empty((n,), device=x.device, dtype=w.dtype)
    index = ops._device_index(xd)

    def one_launch():
        ops.DW_SUM.launch(
            (-(-n // ops.SUM_BLOCK_N),),
            (partial, dw_out, groups, n),
            (),
            (ops.SUM_BLOCK_G, ops.SUM_BLOCK_N),
            4,
            1,
            index,
        )

    def minimal():
        torch.autograd.grad(_MinimalFunction.apply(x, w), (x, w), dy)

    def function_forward():
        RMSNormFunction.apply(x, w, EPS, 0.0, None, False)

    def minimal_forward():
        _MinimalFunction.apply(x, w)

    launch_in_backward_node = _empty_node(lambda dy: (one_launch(), dy)[1])
    alloc_in_backward_node = _empty_node(torch.empty_like)

    def launch_in_backward():
        torch.autograd.grad(launch_in_backward_node.apply(x, w), (x,), dy)

    def alloc_in_backward():
        torch.autograd.grad(alloc_in_backward_node.apply(x, w), (x,), dy)

    def launch_then_empty():
        one_launch()
        torch.autograd.grad(_EmptyFunction.apply(x, w), (x,), dy)

    worker = _Worker()

    def backward_launch():
        ops.launch_backward(dy, xd, wd, rstd, 0.0, None, x.dtype)

    def launchers_two_threads():
        ops.launch_forward(xd, wd, None, EPS, 0.0, x.dtype)
        worker.call(backward_launch)

    def hop_only():
        worker.call(int)

    side = torch.cuda.Stream() if x.is_cuda else None

    def minimal_side_stream():
        with torch.cuda.stream(side):
            torch.autograd.grad(_MinimalFunction.apply(x, w), (x, w), dy)

    def native_side_stream():
        with torch.cuda.stream(side):
            torch.autograd.grad(F.rms_norm(x, (n,), w, EPS), (x, w), dy)

    def empty_function():
        torch.autograd.grad(_EmptyFunction.apply(x, w), (x,), dy)

    def native():
        torch.autograd.grad(F.rms_norm(x, (n,), w, EPS), (x, w), dy)

    def native_forward():
        F.rms_norm(xd, (n,), wd, EPS)

    rows = {
        "ours": ours,
        "function": function,
        "launchers": launchers,
        "forward only": forward_only,
        "minimal Function": minimal,
        "function fwd only": function_forward,
        "minimal fwd only": minimal_forward,
        "allocs": allocs,
        "one cached launch": one_launch,
        "empty Function": empty_function,
        "empty + launch in bwd": launch_in_backward,
        "empty + alloc in bwd": alloc_in_backward,
        "launch, then empty": launch_then_empty,
        "F.rms_norm fwd+bwd": native,
        "F.rms_norm fwd": native_forward,
        "launchers (bwd on a 2nd thread)": launchers_two_threads,
        "hop to a 2nd thread": hop_only,
    }
    if side is not None:
        rows["minimal, side stream"] = minimal_side_stream
        rows["F.rms_norm, side stream"] = native_side_stream
    return rows


#: Functions whose inclusive host time ``--attribute`` sums, on whichever thread they run (the
#: backward runs on autograd's device thread, which cProfile does not see).
_ATTRIBUTED = [
    (function, "_rmsnorm"),
    (RMSNormFunction, "forward"),
    (RMSNormFunction, "backward"),
    (function, "_forward"),
    (function, "_backward"),
    (ops, "launch_forward"),
    (ops, "launch_backward"),
    (launch.CachedKernel, "launch"),
]


def attribute(fn, device: str, calls: int) -> dict:
    """Microseconds per call spent inside each of _ATTRIBUTED (inclusive), by wrapping them."""
    spent = {}
    saved = []
    for owner, name in _ATTRIBUTED:
        raw = owner.__dict__[name]
        inner = raw.__func__ if isinstance(raw, staticmethod) else raw
        label = f"{getattr(owner, '__name__', owner)}.{name}"
        spent[label] = 0.0

        def wrapped(*a, _inner=inner, _label=label, **k):
            t0 = time.perf_counter()
            try:
                return _inner(*a, **k)
            finally:
                spent[_label] += time.perf_counter() - t0

        saved.append((owner, name, raw))
        setattr(owner, name, staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped)
    # rmsnorm() resolves _rmsnorm, _forward and _backward as module globals: patched above.
    try:
        host_us(fn, device, calls)  # a first pass, not counted
        for k in spent:
            spent[k] = 0.0
        total = host_us(fn, device, calls)  # its warm-up calls are counted in spent too
    finally:
        for owner, name, raw in saved:
            setattr(owner, name, raw)
    warm = max(2, calls // 40)
    return {"total": total} | {k: v / (calls + warm) * 1e6 for k, v in spent.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--n", type=int, default=257)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json", default=None)
    p.add_argument("--rows", default=None, help="comma-separated row names (default: all)")
    p.add_argument("--attribute", action="store_true", help="also split 'ours' by layer")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    calls = args.calls if device == "cuda" else 4  # the interpreter: a smoke test only
    torch.manual_seed(0)
    x = torch.randn(args.m, args.n, device=device, requires_grad=True)
    w = torch.ones(args.n, device=device, requires_grad=True)
    dy = torch.randn(args.m, args.n, device=device)
    calls_of = variants(x, w, dy)
    if args.rows:
        keep = args.rows.split(",") + ["F.rms_norm fwd+bwd"]  # the yardstick is always timed
        calls_of = {name: fn for name, fn in calls_of.items() if name in keep}
    times = interleaved(calls_of, device, calls, ROUNDS, f"{args.m}x{args.n} float32")
    shares = {}
    if args.attribute:
        shares = attribute(variants(x, w, dy)["ours"], device, calls)
        print("inclusive host us per call inside each layer of 'ours' (wrapped: adds its cost)")
        for name, us in shares.items():
            print(f"  {name:34s} {us:8.1f}")
        print("cached-kernel launches:", {k.fn.__name__: k.launches for k in _KERNELS})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(device=device, m=args.m, n=args.n, rounds=times, attributed=shares),
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()

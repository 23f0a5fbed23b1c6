"""Host cost of our calls at shapes whose kernels are long: the end-to-end rows of ``make bench``
are host-bound there, and the 128x257 host row takes none of the TMA backward's descriptors.

The GPU is held busy first (``torch.cuda._sleep``), so the ``CALLS`` calls of a round only queue
work and the host time per call is measured alone, at any shape. Rows (host µs per call, median
of ``ROUNDS`` interleaved rounds):

- ``fb <impl>``: forward + ``autograd.grad`` (ours, F.rms_norm);
- ``fwd <impl>``: forward with grad enabled;
- ``bwd heuristic`` / ``bwd pointers``: ``ops.launch_backward`` with the heuristic's config (the
  TMA backward where it applies) and with the pointer kernels' (``tma=False``);
- ``descriptors x3``: the three ``TensorDescriptor`` the TMA backward builds.

Then a cProfile of the TMA backward's launches. Run on a GPU box:

    PYTHONPATH=src python3 experiments/kernel_perf/tma_host.py [OUT.json]
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import rmsnorm_kernel as rk
from rmsnorm_kernel import ops
from rmsnorm_kernel.config import backward_config

CALLS = 40  # x ~6 launches stays far below the GPU's queue depth (1024): the host never waits
ROUNDS = 9
SLEEP_CYCLES = 400_000_000  # ~0.2 s at the H200's ~1.98 GHz: longer than one round's host work
SHAPES = [(128, 257, torch.float32), (4096, 4096, torch.bfloat16)]
SHAPES += [(16384, 4096, torch.bfloat16), (65536, 1024, torch.bfloat16)]


def host_us(call) -> float:
    """Host µs per call of ``CALLS`` calls queued behind a sleeping GPU."""
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / CALLS * 1e6


def calls_for(m: int, n: int, dtype: torch.dtype) -> dict:
    x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.ones(n, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    impls = {
        "ours": lambda: rk.rmsnorm(x, w, 1e-6),
        "torch": lambda: F.rms_norm(x, (n,), w, 1e-6),
    }
    calls = {}
    for name, f in impls.items():
        calls[f"fb {name}"] = lambda f=f: torch.autograd.grad(f(), (x, w), dy)
        calls[f"fwd {name}"] = f
    xd, wd = x.detach(), w.detach()
    _, rstd = ops.forward_op(xd, wd, 1e-6)
    index = torch.cuda.current_device()
    pointers = backward_config(m, n, index, itemsize=x.element_size(), tma=False)

    def bwd(config=None):
        return ops.launch_backward(dy, xd, wd, rstd, 0.0, None, dtype, config=config)

    calls["bwd heuristic"] = bwd
    calls["bwd pointers"] = lambda: bwd(pointers)
    if n in (1024, 4096):
        rows = 64
        calls["descriptors x3"] = lambda: [ops._rows_desc(t, m, n, rows) for t in (dy, xd, dy)]
    return calls, bwd


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else None
    report = {"calls": CALLS, "rounds": ROUNDS, "rows": []}
    for m, n, dtype in SHAPES:
        calls, bwd = calls_for(m, n, dtype)
        for call in calls.values():  # compile and warm every path first
            for _ in range(3):
                call()
        torch.cuda.synchronize()
        times = {name: [] for name in calls}
        for r in range(ROUNDS):
            names = list(calls)
            names = names[r % len(names) :] + names[: r % len(names)]  # rotate the order
            for name in names:
                times[name].append(host_us(calls[name]))
        shape = f"{m}x{n} {str(dtype).replace('torch.', '')}"
        base = statistics.median(times["fb torch"])
        for name, ts in times.items():
            med = statistics.median(ts)
            row = {"shape": shape, "row": name, "us": med, "rounds": ts}
            row["vs_torch_fb"] = med / base
            report["rows"].append(row)
            print(f"{shape:22} {name:16} {med:8.1f} us  ({med / base:.2f}x torch fb)", flush=True)
        if n == 4096 and m == 16384:
            prof = cProfile.Profile()
            torch.cuda._sleep(SLEEP_CYCLES)
            prof.enable()
            for _ in range(CALLS):
                bwd()
            prof.disable()
            torch.cuda.synchronize()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            report["profile_bwd_16384x4096"] = s.getvalue()
            print(s.getvalue())
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

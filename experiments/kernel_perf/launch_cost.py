"""Host cost of one Triton launch, split: what our cached launch adds, what Triton's launcher adds
per pointer argument, and what its Python ``CudaLauncher.__call__`` frame adds. Run on a GPU box:

    PYTHONPATH=src python3 experiments/kernel_perf/launch_cost.py [OUT.json]

Rows (host µs per launch: ``CALLS`` launches, one synchronisation at the end; median of
``ROUNDS`` interleaved rounds), on kernels that do nothing but take 1 or 12 pointers:

- ``aten add_``: a 1-element ``add_``, the runtime-API launch every PyTorch op pays;
- ``cached p1 / p12``: :class:`rmsnorm_kernel.launch.CachedKernel` (our hot path: key + run);
- ``run p12 tensors``: ``CompiledKernel.run`` with tensors (no key): the launcher calls
  ``data_ptr()`` and ``cuPointerGetAttribute`` per tensor;
- ``run p12 ints``: the same with ``data_ptr()`` ints, which the launcher takes as they are;
- ``c-launch p12 ints`` (Triton 3.6's launcher signature only): the compiled C ``launch`` without
  ``CudaLauncher.__call__``'s Python frame.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import triton
import triton.language as tl

from rmsnorm_kernel.launch import CachedKernel

CALLS = 2000
ROUNDS = 9


@triton.jit
def _p1(P0, n):
    if n < 0:  # never: the kernel must keep its parameters, not do work
        tl.store(P0, 0.0)


@triton.jit
def _p12(P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, n):
    if n < 0:
        tl.store(P0, 0.0)
        tl.store(P11, 0.0)


def main() -> None:
    dev = torch.cuda.current_device()
    bufs = [torch.empty(16, device="cuda") for _ in range(12)]
    ptrs = [b.data_ptr() for b in bufs]
    one = torch.zeros(1, device="cuda")
    k1, k12 = CachedKernel(_p1), CachedKernel(_p12)
    for _ in range(3):  # compile, then fill the handle tables
        k1.launch((1,), (bufs[0], 16), (), (), 4, 1, dev)
        k12.launch((1,), (*bufs, 16), (), (), 4, 1, dev)
    compiled = _p12[(1,)](*bufs, 16, num_warps=4)
    run, fn, packed = compiled.run, compiled.function, compiled.packed_metadata
    stream = torch._C._cuda_getCurrentRawStream(dev)
    head = (1, 1, 1, stream, fn, packed, None, None, None)
    rows = {
        "aten add_": lambda: one.add_(1.0),
        "cached p1": lambda: k1.launch((1,), (bufs[0], 16), (), (), 4, 1, dev),
        "cached p12": lambda: k12.launch((1,), (*bufs, 16), (), (), 4, 1, dev),
        "run p12 tensors": lambda: run(*head, *bufs, 16),
        "run p12 ints": lambda: run(*head, *ptrs, 16),
    }
    launcher = getattr(run, "launch", None)
    if triton.__version__.startswith("3.6") and launcher is not None:
        coop, pdl = run.launch_cooperative_grid, run.launch_pdl
        c_head = (1, 1, 1, stream, fn, coop, pdl, None, None, packed, None, None, None)
        rows["c-launch p12 ints"] = lambda: launcher(*c_head, *ptrs, 16)
    times: dict[str, list[float]] = {name: [] for name in rows}
    for f in rows.values():
        for _ in range(200):
            f()
    torch.cuda.synchronize()
    for _ in range(ROUNDS):
        for name, f in rows.items():
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(CALLS):
                f()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t) / CALLS * 1e6)
    result = {name: statistics.median(v) for name, v in times.items()}
    base = result["aten add_"]
    for name, us in result.items():
        print(f"{name:20s} {us:7.2f} us/launch  {us / base:5.2f}x aten add_", flush=True)
    out = {
        "triton": triton.__version__,
        "torch": torch.__version__,
        "rounds": ROUNDS,
        "calls": CALLS,
        "us_per_launch": result,
        "samples": times,
    }
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()

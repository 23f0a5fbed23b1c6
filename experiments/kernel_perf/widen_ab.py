"""fp16 widening A/B: the heuristic's fp16 kernels that widen 16-bit values from their bits
(``kernels.common._widen_by_bits``: the packed one-row forward, the cluster backward), timed under
CUDA-graph replay, with bf16 beside them (its widening is one shift). Run it once per variant of
the widening (a separate process each: the choice is a constexpr fixed at import) and compare
the printed times; the printed checksums of y, dx and dweight must agree between variants (the
widening is exact either way).

    PYTHONPATH=src python3 experiments/kernel_perf/widen_ab.py --json OUT.json [--label bits]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics

import torch
from triton.testing import do_bench_cudagraph

from rmsnorm_kernel import ops

FP16, BF16 = torch.float16, torch.bfloat16
#: (M, N, dtype, part): the packed forward's fp16 widths (config.PACKED_FORWARD) and the cluster
#: backward's 32768 plan (config.BWD_CLUSTER_LAUNCH), bf16 beside each.
CASES = [
    (4096, 65536, "fwd"),
    (1024, 65536, "fwd"),
    (2048, 32768, "fwd"),
    (1024, 32768, "bwd"),
    (2048, 32768, "bwd"),
    (8192, 32768, "bwd"),
]


def digest(*ts: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in ts:
        h.update(t.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def case(m: int, n: int, dtype: torch.dtype, part: str) -> tuple:
    """``(run, checksum)``: the heuristic's forward or backward of one seeded (M, N) case as a
    no-argument callable, and the checksum of its outputs (y and rstd, or dx and dweight)."""
    torch.manual_seed(0)
    x = torch.randn(m, n, device="cuda").to(dtype)
    w = (1 + 0.5 * torch.randn(n, device="cuda")).to(dtype)
    dy = torch.randn(m, n, device="cuda").to(dtype)
    y, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype)
    if part == "fwd":
        return (lambda: ops.launch_forward(x, w, None, 1e-6, 0.0, dtype)), digest(y, rstd)

    def run():
        return ops.launch_backward(dy, x, w, rstd, 0.0, None, dtype)

    return run, digest(*run())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--label", default="")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=int, default=20)
    a = p.parse_args()
    rows = []
    for m, n, part in CASES:
        for dtype in (FP16, BF16):
            run, check = case(m, n, dtype, part)
            times = [do_bench_cudagraph(run, rep=a.rep) * 1e3 for _ in range(a.rounds)]
            us = statistics.median(times)
            row = dict(m=m, n=n, dtype=str(dtype), part=part, us=us, rounds=times, check=check)
            rows.append(row)
            print(f"{a.label:6s} {part} {m}x{n} {str(dtype):15s} {us:8.1f} us  {check}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"label": a.label, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

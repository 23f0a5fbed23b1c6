"""Does our forward's graph time depend on what ran before it? In the bench the 4096 x 4096 and
16384 x 4096 bf16 forwards of ours took 21.7 / 87.9 us (H100) in the table and 24.3 / 91.2 in the
curves after the wide shapes, in two runs (17.2 / 63.8 against 18.2 / 66.1 on the H200), while
Liger's, quack's and compile's stayed within 1%. This times ours, F.rms_norm and Liger (if
installed) at those shapes with the bench's graph timer, first on a fresh process, then after
each of a list of disturbances (an eager wide fwd+bwd that grows the allocator's pool, the same
after ``torch.cuda.empty_cache()``, the bench's other table shapes), interleaved. Run on a GPU
box:

    PYTHONPATH=src python3 experiments/kernel_perf/state_probe.py [OUT.json]
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

import rmsnorm_kernel as rk
from rmsnorm_kernel.cli.bench.measure import Inputs, maker
from rmsnorm_kernel.cli.bench.timers import CudaTimers

TIMING = {"graph": {"warmup_calls": 3, "target_ms": 5, "max_calls": 500, "replays": 10}}
SHAPES = [(4096, 4096), (16384, 4096)]


def impls() -> dict:
    out = {"ours": lambda x, w: rk.rmsnorm(x, w, 1e-6)}
    out["torch"] = lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        out["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
    except ImportError:
        pass
    return out


def inputs(m: int, n: int) -> Inputs:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(torch.bfloat16)
    return Inputs(x, w, torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g))


def wide_fwd_bwd(m: int = 4096, n: int = 65536) -> None:
    """An eager fwd + grad of ours at a wide shape (the bench's last table row)."""
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch.autograd.grad(rk.rmsnorm(x, w, 1e-6), (x, w), torch.randn_like(x))
    torch.cuda.synchronize()


def table_shapes() -> None:
    """Ours' fwd + grad once at each of the bench's table shapes, as the table leaves them."""
    for m, n, dt in [(32768, 8192, torch.bfloat16), (65536, 1024, torch.bfloat16)] + [
        (8192, 16384, torch.bfloat16), (16384, 4096, torch.float32)
    ]:  # fmt: skip
        x = torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True)
        w = torch.ones(n, device="cuda", dtype=dt, requires_grad=True)
        torch.autograd.grad(rk.rmsnorm(x, w, 1e-6), (x, w), torch.randn_like(x))
    torch.cuda.synchronize()


def main() -> None:
    timers = CudaTimers(TIMING)
    fs = impls()
    data = {(m, n): inputs(m, n) for m, n in SHAPES}
    steps = [("fresh", None), ("after table shapes", table_shapes)]
    steps += [("after 4096x65536 fwd+bwd", wide_fwd_bwd)]
    steps += [("after empty_cache", torch.cuda.empty_cache), ("again", None)]
    report = []
    for label, disturb in steps:
        if disturb is not None:
            disturb()
        for (m, n), inp in data.items():
            row = {"step": label, "shape": f"{m}x{n}"}
            for name, f in fs.items():
                row[name] = timers.graph(maker(f, inp, "forward", False))
            report.append(row)
            cells = "  ".join(f"{k} {v:7.2f}" for k, v in row.items() if k not in ("step", "shape"))
            print(f"{label:26s} {m}x{n} bf16 fwd graph us: {cells}", flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

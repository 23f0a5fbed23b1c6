"""Does our forward's graph time depend on what ran before it? In the bench the 4096 x 4096 and
16384 x 4096 bf16 forwards of ours took 21.7 / 87.9 us (H100) in the table and 24.3 / 91.2 in the
curves after the wide shapes, in two runs (17.2 / 63.8 against 18.2 / 66.1 on the H200), while
Liger's, quack's and compile's stayed within 1%. This times ours, F.rms_norm and Liger (if
installed) at those shapes with the bench's graph timer, first on a fresh process, then after
each of a list of disturbances (the bench's other table shapes; the table's own first steps at
a shape, ``Runner.errors`` and ``Runner.memory``; a float64 copy of x allocated and freed;
``torch.cuda.empty_cache()``; an eager wide fwd+bwd), interleaved. Run on a GPU box:

    PYTHONPATH=src python3 experiments/kernel_perf/state_probe.py [OUT.json]

Forty-seventh session (H100, ``results/h100_2026-12-06g_state/``): no step moved any of them
(ours 24.1-24.8 / 91.1-91.5, Liger 24.7-25.1 / 91.3-91.8). The bench's fast state needs the
compile peer: see ``placement_probe.py`` and ``../kernel_perf/README.md``.
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


def errors_like(inp: Inputs) -> None:
    """What the bench's table does first at a shape (``Runner.errors``): a float64 oracle of the
    inputs, then ours eagerly under no_grad on the inputs themselves; the oracle is freed."""
    from rmsnorm_kernel.reference import rmsnorm_reference

    with torch.no_grad():
        oracle = rmsnorm_reference(inp.x.double(), inp.w.double(), 1e-6)
        float((rk.rmsnorm(inp.x, inp.w, 1e-6).double() - oracle).abs().max())
    del oracle
    torch.cuda.synchronize()


def memory_like(inp: Inputs) -> None:
    """The table's next step (``Runner.memory``): ``peak_bytes`` of ours' forward."""
    CudaTimers(TIMING).peak_bytes(maker(impls()["ours"], inp, "forward", False))


def float64_only(inp: Inputs) -> None:
    """Only the oracle's allocations (a float64 copy of x, freed): moves where x's clone lands."""
    t = inp.x.double()
    del t
    torch.cuda.synchronize()


def main() -> None:
    timers = CudaTimers(TIMING)
    fs = impls()
    data = {(m, n): inputs(m, n) for m, n in SHAPES}
    # (label, disturbance of one shape's inputs or of the process, per shape?)
    steps = [("fresh", None), ("after table shapes", table_shapes)]
    steps += [("after errors-like", errors_like), ("after memory-like", memory_like)]
    steps += [("after empty_cache", torch.cuda.empty_cache), ("after float64 only", float64_only)]
    steps += [("after 4096x65536 fwd+bwd", wide_fwd_bwd), ("again", None)]
    report = []
    for label, disturb in steps:
        if disturb is not None and disturb not in (errors_like, memory_like, float64_only):
            disturb()
        for (m, n), inp in data.items():
            if disturb in (errors_like, memory_like, float64_only):
                disturb(inp)
            row = {"step": label, "shape": f"{m}x{n}"}
            for name, f in fs.items():
                row[name] = timers.graph(maker(f, inp, "forward", False))
            report.append(row)
            cells = "  ".join(f"{k} {v:7.2f}" for k, v in row.items() if k not in ("step", "shape"))
            print(f"{label:26s} {m}x{n} bf16 fwd graph us: {cells}", flush=True)
    write_report(report)


def write_report(report: list[dict]) -> None:
    """The probe's rows as JSON to the path given as its first argument, if any."""
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

"""Which step of the bench puts a kernel in the fast state? In two-shape benches (H100, 47th
session) our 4096 x 4096 bf16 forward took 24.5 us when timed first at a shape and 21.7 when timed
after the compile peer; Liger the same (22.0 after compile); with no compile peer in the run every
implementation took 24.4-25.0, and an eager ``torch.compile`` call alone did not do it
(``placement_probe.py``). This times ours (graph replay, the bench's timer) after each step of a
fixed sequence at one shape, in one process: the compile peer's eager call, its graph timing,
Liger's and F.rms_norm's graph timings, ``torch._dynamo.reset()``, ``empty_cache``; and records
the allocator's reserved bytes and segments after each (``torch.cuda.memory_stats``). Run on a
GPU box:

    PYTHONPATH=src python3 experiments/kernel_perf/order_probe.py [OUT.json]
"""

from __future__ import annotations

import torch
from state_probe import TIMING, impls, inputs, write_report  # (this folder is on sys.path)

from rmsnorm_kernel.cli.bench.measure import maker
from rmsnorm_kernel.cli.bench.peers import PEERS
from rmsnorm_kernel.cli.bench.timers import CudaTimers

SHAPE = (4096, 4096)


def main() -> None:
    timers = CudaTimers(TIMING)
    fs = impls()
    fs["compile"] = PEERS["compile"].build(1e-6)
    inp = inputs(*SHAPE)

    def graph(name: str) -> float:
        return round(timers.graph(maker(fs[name], inp, "forward", False)), 2)

    def eager(name: str) -> None:
        with torch.no_grad():
            fs[name](inp.x, inp.w)
        torch.cuda.synchronize()

    steps = [
        ("first", lambda: None),
        ("ours again", lambda: None),
        ("after compile eager", lambda: eager("compile")),
        ("after compile graph", lambda: graph("compile")),
        ("after ours graph", lambda: graph("ours")),
        ("after torch graph", lambda: graph("torch")),
        ("after dynamo reset", torch._dynamo.reset),
        ("after empty_cache", torch.cuda.empty_cache),
        ("after compile graph again", lambda: graph("compile")),
    ]
    if "liger" in fs:
        steps.insert(6, ("after liger graph", lambda: graph("liger")))
    report = []
    for label, step in steps:
        before = step()
        stats = torch.cuda.memory_stats()
        row = {
            "step": label,
            "step_value": before,
            "ours": graph("ours"),
            "reserved_mib": stats["reserved_bytes.all.current"] >> 20,
            "segments": stats["segment.all.current"],
        }
        report.append(row)
        print(row, flush=True)
    write_report(report)


if __name__ == "__main__":
    main()

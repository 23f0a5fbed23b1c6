"""Is the 4096-column forward's graph time a matter of where its tensors land? In the bench our
4096 x 4096 bf16 forward took 21.7 us in the table and 24.5 in the curves (H100), Liger 22.0 in
both; without the compile peer in the run every one of them took 24.5-25.0
(``results/h100_2026-12-06g_state/``). This times ours and Liger (graph replay, the bench's timer)
with a pad tensor of each size kept alive before the inputs' clones are made (it moves where the
clones and the graph's outputs land), then after one ``torch.compile`` of the reference at the
shape. Run on a GPU box:

    PYTHONPATH=src python3 experiments/kernel_perf/placement_probe.py [OUT.json]

Forty-seventh session (H100): neither moved them (ours 24.38-24.75 us, Liger 24.88-25.10 at
every pad and after the compile), while in a two-shape bench ordered compile, Liger, ours, ours
took 21.7 / 88.4 in the curves too (``m3.log``): the fast state follows the compile peer's timing
in the bench, not where the tensors land nor an Inductor compile alone.
"""

from __future__ import annotations

import torch
from state_probe import TIMING, impls, inputs, write_report  # (this folder is on sys.path)

from rmsnorm_kernel.cli.bench.measure import maker
from rmsnorm_kernel.cli.bench.timers import CudaTimers
from rmsnorm_kernel.reference import rmsnorm_reference

PADS_MIB = [0, 2, 8, 32, 64, 96]
SHAPE = (4096, 4096)


def time_all(timers, fs, inp) -> dict:
    return {name: round(timers.graph(maker(f, inp, "forward", False)), 2) for name, f in fs.items()}


def main() -> None:
    timers = CudaTimers(TIMING)
    fs = impls()
    fs.pop("torch", None)
    inp = inputs(*SHAPE)
    report = []
    for pad in PADS_MIB + ["compile", 0, 32]:
        if pad == "compile":
            compiled = torch.compile(lambda x, w: rmsnorm_reference(x, w, 1e-6))
            with torch.no_grad():
                compiled(inp.x, inp.w)
            torch.cuda.synchronize()
            keep = None
        else:
            keep = torch.empty(pad << 20, dtype=torch.uint8, device="cuda") if pad else None
        row = {"pad_mib": pad, **time_all(timers, fs, inp)}
        del keep
        report.append(row)
        print(row, flush=True)
    write_report(report)


if __name__ == "__main__":
    main()

"""Why the bench's curves time our N = 4096 forward 1-2 us above its table (same shape, same
run; h200_2026-12-04d and -04e), while the peers' figures agree: the two sections differ only
in what runs before the timing. Here, in one process, the bench's own timers and inputs:

- ``curve``: fresh inputs (after ``empty_cache``), then graph timing right away, ours first;
- ``table``: fresh inputs, then the table's extras first (every implementation's forward under
  no_grad on the inputs, and its peak-memory pass), then the timing;
- ``again``: the same inputs timed once more.

Each in 3 rounds per shape, the order of the two sections alternating; medians printed.

    PYTHONPATH=<peers' site>:src python3 experiments/kernel_vs_peers/order_probe.py --out o.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import yaml

from rmsnorm_kernel.cli.bench import peers
from rmsnorm_kernel.cli.bench.measure import make_inputs, maker
from rmsnorm_kernel.cli.bench.plan import Shape
from rmsnorm_kernel.cli.bench.timers import CudaTimers

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [Shape(16384, 4096, "bfloat16"), Shape(4096, 4096, "bfloat16")]
IMPLS = ["ours", "liger", "torch"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    cfg = yaml.safe_load((ROOT / "conf" / "benchmark" / "default.yaml").read_text())
    timers = CudaTimers(cfg["timing"])
    impls = {k: v for k, v in peers.build(IMPLS, cfg["eps"]).items() if callable(v)}
    rows = []

    def time_all(section, shape, inputs, rnd):
        for name, f in impls.items():
            us = timers.time("graph", maker(f, inputs, "forward", False))
            rows.append(dict(section=section, shape=shape.label, impl=name, round=rnd, us=us))
            print(json.dumps(rows[-1]), flush=True)

    for shape in SHAPES:
        for rnd in range(args.rounds):
            order = ["curve", "table"] if rnd % 2 == 0 else ["table", "curve"]
            for section in order:
                torch.cuda.empty_cache()
                inputs = make_inputs(shape, "cuda", cfg["seed"])
                if section == "table":
                    with torch.no_grad():
                        for f in impls.values():
                            f(inputs.x, inputs.w)
                    for f in impls.values():
                        timers.peak_bytes(maker(f, inputs, "forward", False))
                time_all(section, shape, inputs, rnd)
                time_all(section + " again", shape, inputs, rnd)
                del inputs
    summary = {}
    for r in rows:
        summary.setdefault((r["shape"], r["section"], r["impl"]), []).append(r["us"])
    for (shape, section, impl), us in sorted(summary.items()):
        print(f"{shape:24s} {section:12s} {impl:6s} median {statistics.median(us):7.2f} us {us}")
    Path(args.out).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), rows=rows)))


if __name__ == "__main__":
    main()

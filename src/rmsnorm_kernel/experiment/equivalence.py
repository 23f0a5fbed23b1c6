"""Did a DDP run train like one process? Two finished runs of one branch, compared.

``compare_runs(ddp, single)`` reads each run's ``metrics.json`` and TensorBoard curves (and the
exported weights) and returns the largest differences with a verdict against :data:`TOLERANCES`.
Used by ``tests/experiment/test_ddp.py`` (CPU, gloo) and ``experiments/ddp/`` (GPUs, NCCL):

    python -m rmsnorm_kernel.experiment.equivalence DDP_SWEEP_DIR SINGLE_SWEEP_DIR [--out FILE]

pairs the runs of two sweeps by norm and exits 1 when any pair differs beyond a tolerance.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from .checkpoint import INPUTS, PREDICTIONS
from .compare.load import find_runs, read_curves
from .run import METRICS_FILE

# Fixed before any DDP result was looked at. Both runs see the same rows at every step and
# average the same gradients; what differs is only the order of float32 sums: the loss is the
# mean of two 16-row means instead of one 32-row mean, the gradient the mean of two 16-row sums.
# That moves O(1) values by a few float32 ulps (1.2e-7) per step; 1e-5 (the project's float32
# atol) leaves room for that to accumulate. A wrong shard (ranks repeating or missing rows) moves
# the loss by the batch-to-batch spread (~1e-1), and a gradient summed instead of averaged
# doubles every SGD step; both are orders of magnitude above it.
TOLERANCES = {
    "curve_max_abs": 1e-5,  # max |delta| of train/loss and val/loss at any logged step
    "metric_abs": 1e-5,  # |delta test/mse|
    "weight_max_abs": 1e-5,  # max |delta| of any exported weight after training
}
CURVES = ("train/loss", "val/loss")


def _metrics(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / METRICS_FILE).read_text())


def _curve_diff(a: dict, b: dict, tag: str) -> float:
    ca = dict(zip(*read_curves(Path(a["log_dir"]))[tag], strict=True))
    cb = dict(zip(*read_curves(Path(b["log_dir"]))[tag], strict=True))
    if ca.keys() != cb.keys() or not ca:
        raise ValueError(f"{tag}: logged at different steps ({sorted(ca)} vs {sorted(cb)})")
    return max(abs(ca[s] - cb[s]) for s in ca)


def _weight_diff(a: dict, b: dict) -> float:
    ta, tb = load_file(a["checkpoint"]), load_file(b["checkpoint"])
    keys = [k for k in ta if k not in (INPUTS, PREDICTIONS)]  # the weights only
    if not keys or set(keys) - set(tb):
        raise ValueError(f"exports hold different weights: {sorted(ta)} vs {sorted(tb)}")
    return max(float((ta[k].double() - tb[k].double()).abs().max()) for k in keys)


def compare_runs(ddp: dict, single: dict, metric: str = "test/mse") -> dict[str, Any]:
    """Differences between two runs' metrics dicts (``metrics.json``) of the same branch.

    Returns:
        ``{"norm", "world_size": [ddp, single], "curve_max_abs": {tag: float},
        "metric_abs", "weight_max_abs", "tolerances", "passed"}``.
    """
    if ddp["norm"] != single["norm"]:
        raise ValueError(f"runs of different norms: {ddp['norm']!r} vs {single['norm']!r}")
    curves = {tag: _curve_diff(ddp, single, tag) for tag in CURVES}
    result = {
        "norm": ddp["norm"],
        "world_size": [ddp.get("world_size", 1), single.get("world_size", 1)],
        "metric": metric,
        "values": [ddp[metric], single[metric]],
        "curve_max_abs": curves,
        "metric_abs": abs(ddp[metric] - single[metric]),
        "weight_max_abs": _weight_diff(ddp, single),
        "tolerances": TOLERANCES,
    }
    result["passed"] = (
        max(curves.values()) <= TOLERANCES["curve_max_abs"]
        and result["metric_abs"] <= TOLERANCES["metric_abs"]
        and result["weight_max_abs"] <= TOLERANCES["weight_max_abs"]
    )
    return result


def compare_sweeps(ddp_dir: Path, single_dir: Path) -> dict[str, Any]:
    """Pairs the runs of two sweeps by norm (one run per norm in each) and compares each pair."""
    sweeps = []
    for sweep in (ddp_dir, single_dir):
        runs = [_metrics(d) for d in find_runs(Path(sweep))]
        by_norm = {m["norm"]: m for m in runs}
        if not runs or len(by_norm) != len(runs):
            raise ValueError(f"{sweep}: expected one finished run per norm (found {len(runs)})")
        sweeps.append(by_norm)
    if sweeps[0].keys() != sweeps[1].keys():
        raise ValueError(
            f"the sweeps ran different norms: {sorted(sweeps[0])} vs {sorted(sweeps[1])}"
        )
    pairs = [compare_runs(sweeps[0][n], sweeps[1][n]) for n in sorted(sweeps[0])]
    return {"pairs": pairs, "passed": all(p["passed"] for p in pairs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ddp_sweep", type=Path)
    parser.add_argument("single_sweep", type=Path)
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    result = compare_sweeps(args.ddp_sweep, args.single_sweep)
    for p in result["pairs"]:
        curves = ", ".join(f"{k} {v:.2e}" for k, v in p["curve_max_abs"].items())
        print(
            f"{p['norm']:>10}  {p['world_size'][0]} vs {p['world_size'][1]} processes  "
            f"{p['metric']} {p['values'][0]:.10f} vs {p['values'][1]:.10f} "
            f"(|delta| {p['metric_abs']:.2e})  max |delta| {curves}, "
            f"weights {p['weight_max_abs']:.2e}  {'PASSED' if p['passed'] else 'FAILED'}"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("PASSED" if result["passed"] else f"FAILED (tolerances {TOLERANCES})")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

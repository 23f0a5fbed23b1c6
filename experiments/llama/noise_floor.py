"""The LM criterion's noise floor: how far two correct runs' losses drift apart on this machine.

    python experiments/llama/noise_floor.py --sweeps SWEEP [SWEEP ...] [--check SWEEP ...] --out F

Each ``SWEEP`` holds ``norm=hf`` runs and possibly ``norm=torch`` runs, all of the same seed,
data and initial weights (``trainer.deterministic=false``), for one or more settings (e.g.
``experiment`` x ``trainer.precision``). Per setting, over every pair it can form:

- hf vs hf (two sweeps' hf runs): max |delta train/loss| over the steps, and |delta test/loss|
  (nondeterminism alone);
- torch vs hf (each torch run against each hf run): the same (a correct norm, another rounding
  order);

floor = the larger of the two; limit = FACTOR x floor (conf/compare/lm.yaml's rule). With
``--check``, every branch of those sweeps other than hf is judged against its setting's limits
(the planted wrong branches must fail). Writes one JSON and prints a table. Runs are read with the
comparison's own loader (``rmsnorm_kernel.experiment.analysis``): run it where the sweeps ran.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rmsnorm_kernel.experiment.analysis.curves import max_curve_delta
from rmsnorm_kernel.experiment.analysis.load import find_runs, load_run

CURVE, METRIC = "train/loss", "test/loss"
#: Keys that name where a run wrote, not what it ran.
IGNORED = ("norm", "paths.", "hydra.")


def setting(run) -> tuple:
    o = run.metrics.get("overrides", {})
    return tuple(sorted((k, v) for k, v in o.items() if not k.startswith(IGNORED)))


def by_setting(sweep: Path) -> dict[tuple, dict[str, object]]:
    out: dict[tuple, dict[str, object]] = {}
    for d in find_runs(sweep):
        run = load_run(d)
        out.setdefault(setting(run), {})[run.norm] = run
    return out


def deltas(run, base) -> dict[str, float]:
    curve, steps = max_curve_delta(run, base, CURVE)
    return {
        "curve": curve,
        "metric": abs(run.metrics[METRIC] - base.metrics[METRIC]),
        "steps": steps,
    }


def pairs_max(pairs) -> dict[str, float]:
    """Component-wise max of ``deltas`` over ``(run, base)`` pairs (at least one)."""
    found = [deltas(run, base) for run, base in pairs]
    worst = {k: max(d[k] for d in found) for k in ("curve", "metric", "steps")}
    return worst | {"pairs": len(found)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweeps", type=Path, nargs="+", required=True, help="hf (and torch) sweeps")
    p.add_argument("--check", type=Path, nargs="*", default=[], help="sweeps to judge")
    p.add_argument("--factor", type=float, default=2.0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    sweeps = [by_setting(s) for s in args.sweeps]
    checks = [by_setting(s) for s in args.check]
    if not any(sweeps):
        raise SystemExit(f"no runs found in {[str(s) for s in args.sweeps]}")
    rows, failures = [], []
    for key in sorted({k for s in sweeps for k in s}):
        hf = [s[key]["hf"] for s in sweeps if "hf" in s.get(key, {})]
        torch_runs = [s[key]["torch"] for s in sweeps if "torch" in s.get(key, {})]
        if len(hf) < 2 or not torch_runs:
            raise SystemExit(f"setting {dict(key)}: needs hf in 2+ sweeps and torch in one")
        hf_hf = pairs_max((a, b) for i, a in enumerate(hf) for b in hf[i + 1 :])
        torch_hf = pairs_max((t, h) for t in torch_runs for h in hf)
        floor = {k: max(hf_hf[k], torch_hf[k]) for k in ("curve", "metric")}
        limit = {k: args.factor * v for k, v in floor.items()}
        row = {
            "setting": dict(key),
            "hf_runs": len(hf),
            "torch_runs": len(torch_runs),
            "hf_vs_hf": hf_hf,
            "torch_vs_hf": torch_hf,
            "floor": floor,
            "limit": limit,
            "judged": {},
        }
        for sweep in checks:
            branches = sweep.get(key, {})
            base = branches.get("hf")
            for name, run in branches.items():
                if name == "hf" or base is None:
                    continue
                d = deltas(run, base)
                d["passed"] = d["curve"] <= limit["curve"] and d["metric"] <= limit["metric"]
                row["judged"][name] = d
                if not d["passed"]:
                    failures.append(f"{dict(key)} {name}")
        rows.append(row)
    result = {"factor": args.factor, "curve": CURVE, "metric": METRIC, "settings": rows}
    args.out.write_text(json.dumps(result, indent=1))
    print(f"{'setting':62} {'pair':14} {'max|Δ curve|':>13} {'|Δ test|':>10}")
    for row in rows:
        name = ",".join(f"{k}={v}" for k, v in row["setting"].items())
        pairs = [("hf vs hf", row["hf_vs_hf"]), ("torch vs hf", row["torch_vs_hf"])]
        pairs += [("limit", row["limit"])] + list(row["judged"].items())
        for label, d in pairs:
            print(f"{name[:62]:62} {label:14} {d['curve']:13.3e} {d['metric']:10.3e}")
    print("judged branches failing the limits:", failures or "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

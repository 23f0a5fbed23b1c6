"""The LM criterion's noise floor: how far two correct runs' losses drift apart on this machine.

    python experiments/llama/noise_floor.py --a SWEEP_A --b SWEEP_B [--check SWEEP ...] --out F

``SWEEP_A`` holds ``norm=hf`` and ``norm=torch`` runs, ``SWEEP_B`` the same ``norm=hf`` runs
again (same seed, data and initial weights; ``trainer.deterministic=false``), for one or more
settings (e.g. ``experiment`` x ``trainer.precision``). Per setting it measures

- hf vs hf: max |delta train/loss| over the steps, and |delta test/loss| (nondeterminism alone);
- torch vs hf: the same (a correct norm with another rounding order);

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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", type=Path, required=True, help="sweep with norm=hf,torch")
    p.add_argument("--b", type=Path, required=True, help="sweep with norm=hf again")
    p.add_argument("--check", type=Path, nargs="*", default=[], help="sweeps to judge")
    p.add_argument("--factor", type=float, default=2.0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    a, b = by_setting(args.a), by_setting(args.b)
    checks = [by_setting(s) for s in args.check]
    rows, failures = [], []
    for key in sorted(a):
        hf_a, torch_a, hf_b = a[key].get("hf"), a[key].get("torch"), b.get(key, {}).get("hf")
        if hf_a is None or torch_a is None or hf_b is None:
            raise SystemExit(f"setting {dict(key)}: needs hf and torch in --a and hf in --b")
        hf_hf, torch_hf = deltas(hf_b, hf_a), deltas(torch_a, hf_a)
        floor = {k: max(hf_hf[k], torch_hf[k]) for k in ("curve", "metric")}
        limit = {k: args.factor * v for k, v in floor.items()}
        row = {
            "setting": dict(key),
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
    print(f"{'setting':48} {'pair':14} {'max|Δ curve|':>13} {'|Δ test|':>10}")
    for row in rows:
        name = ",".join(f"{k}={v}" for k, v in row["setting"].items())
        pairs = [("hf vs hf", row["hf_vs_hf"]), ("torch vs hf", row["torch_vs_hf"])]
        pairs += [("limit", row["limit"])] + list(row["judged"].items())
        for label, d in pairs:
            print(f"{name[:48]:48} {label:14} {d['curve']:13.3e} {d['metric']:10.3e}")
    print("judged branches failing the limits:", failures or "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

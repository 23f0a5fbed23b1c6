"""The verdict: group runs, compare each group's branches with the baseline, summarise seeds.

Runs are grouped by every command-line override except ``norm`` (the runs' recorded
``overrides``), so a sweep ``norm=reference,triton seed=0,1 model.net.hidden_features=32,64``
gives four groups of two branches. Within a group every branch started from the same seed and
saw the same batches, so it is compared with the baseline branch directly:

    |metric(branch) - metric(baseline)| <= delta_metric_tolerance     (e.g. test/mse)
    first-batch output and gradient max abs error <= initial_error_tolerance
    same seed and number of training steps as the baseline

Across seeds (groups that differ only in ``seed``) the summary gives, per branch, the mean and
standard deviation of the metric, and the paired difference branch - baseline (same seed): its
mean and max |delta|.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from ..checkpoint import max_abs_diff
from .load import ComparisonError, Run

#: What a run records that the table and comparison.json show per branch (taken as measured).
RECORDED = (
    "seed",
    "train_steps",
    "forward_calls",
    "backward_calls",
    "expected_calls",
    "reload_max_diff",
    "checkpoint",
    "device",
    "wall_time_s",
)


def swept_keys(runs: Sequence[Run]) -> list[str]:
    """Override keys (other than ``norm``) whose values differ between runs, in first-seen order."""
    keys = list(dict.fromkeys(k for r in runs for k in r.metrics.get("overrides", {})))
    return [
        k
        for k in keys
        if k != "norm" and len({r.metrics.get("overrides", {}).get(k) for r in runs}) > 1
    ]


def group_runs(runs: Sequence[Run]) -> list[tuple[dict[str, str], dict[str, Run]]]:
    """``[(overrides, {norm: run})]``: one entry per combination of the swept overrides.

    Raises :class:`ComparisonError` naming the group when two runs of one norm share a group.
    """
    keys = swept_keys(runs)
    groups: dict[tuple, tuple[dict[str, str], dict[str, Run]]] = {}
    for run in runs:
        overrides = {k: run.metrics.get("overrides", {}).get(k) for k in keys}
        overrides_key = tuple(overrides.items())
        _, branches = groups.setdefault(overrides_key, (overrides, {}))
        if run.norm in branches:
            raise ComparisonError(
                f"group {describe(overrides)}: two runs of norm {run.norm!r} "
                f"({branches[run.norm].dir}, {run.dir}) with the same overrides"
            )
        branches[run.norm] = run
    return list(groups.values())


def describe(overrides: dict[str, Any]) -> str:
    """``seed=1,hidden_features=32`` (``(all runs)`` when nothing but norm was swept)."""
    return ",".join(f"{k}={v}" for k, v in overrides.items()) or "(all runs)"


def _probe_errors(probe: dict, base: dict) -> tuple[float, float]:
    """Max abs output diff and max abs gradient diff of two first-batch probes."""
    if probe.keys() != base.keys():
        raise ComparisonError(f"probes hold different tensors: {sorted(probe)} vs {sorted(base)}")
    grads = [max_abs_diff(probe[k], base[k]) for k in sorted(probe) if k.startswith("grad.")]
    return max_abs_diff(probe["output"], base["output"]), max(grads, default=0.0)


def compare_group(
    overrides: dict[str, str], branches: dict[str, Run], settings: dict[str, Any]
) -> dict[str, Any]:
    """``{"overrides", "branches": {norm: {...}}, "checks": [...], "passed"}`` of one group."""
    baseline, metric = settings["baseline"], settings["metric"]
    if baseline not in branches:
        raise ComparisonError(
            f"group {describe(overrides)} has no baseline branch {baseline!r} "
            f"(branches: {sorted(branches)}); add norm={baseline} to the sweep or set "
            "compare.baseline"
        )
    base = branches[baseline]
    probes = [r.probe is not None for r in branches.values()]
    if any(probes) and not all(probes):
        missing = [n for n, r in branches.items() if r.probe is None]
        raise ComparisonError(f"group {describe(overrides)}: no first-batch probe for {missing}")
    checks: list[dict[str, Any]] = []

    def check(name: str, branch: str, value: Any, limit: Any, passed: bool) -> None:
        checks.append(
            {"name": name, "branch": branch, "value": value, "limit": limit, "passed": bool(passed)}
        )

    out: dict[str, dict[str, Any]] = {}
    for name, run in branches.items():
        if metric not in run.metrics:
            raise ComparisonError(f"{run.dir}: metrics.json records no {metric!r}")
        entry = {metric: run.metrics[metric], "run_dir": str(run.dir)}
        entry.update({k: run.metrics.get(k) for k in RECORDED})
        check(
            "same seed as baseline",
            name,
            entry["seed"],
            base.metrics.get("seed"),
            entry["seed"] == base.metrics.get("seed"),
        )
        check(
            "same train steps as baseline",
            name,
            entry["train_steps"],
            base.metrics.get("train_steps"),
            entry["train_steps"] == base.metrics.get("train_steps"),
        )
        if name != baseline:
            delta = run.metrics[metric] - base.metrics[metric]
            entry["delta"] = delta
            check(
                f"|delta {metric}|",
                name,
                abs(delta),
                settings["delta_metric_tolerance"],
                abs(delta) <= settings["delta_metric_tolerance"],
            )
            if run.probe is not None:
                out_err, grad_err = _probe_errors(run.probe, base.probe)
                entry["initial_output_error"], entry["initial_grad_error"] = out_err, grad_err
                tol = settings["initial_error_tolerance"]
                check("initial output error", name, out_err, tol, out_err <= tol)
                check("initial grad error", name, grad_err, tol, grad_err <= tol)
        out[name] = entry
    return {
        "overrides": overrides,
        "branches": out,
        "checks": checks,
        "passed": all(c["passed"] for c in checks),
    }


def _std(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 1 else None


def summarize(groups: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Across seeds: one entry per combination of the overrides other than ``seed``.

    ``{"overrides", "seeds", "branches": {norm: {"n", "mean", "std", "paired_delta_mean",
    "paired_delta_max_abs"}}}``; ``std`` is the sample standard deviation (None for one seed),
    paired deltas are absent for the baseline.
    """
    baseline, metric = settings["baseline"], settings["metric"]
    pools: dict[tuple, dict[str, Any]] = {}
    for group in groups:
        rest = {k: v for k, v in group["overrides"].items() if k != "seed"}
        pool = pools.setdefault(tuple(rest.items()), {"overrides": rest, "groups": []})
        pool["groups"].append(group)
    summary = []
    for pool in pools.values():
        members = pool["groups"]
        branches: dict[str, dict[str, Any]] = {}
        names = list(dict.fromkeys(n for g in members for n in g["branches"]))
        for name in names:
            values = [g["branches"][name][metric] for g in members if name in g["branches"]]
            entry: dict[str, Any] = {
                "n": len(values),
                "mean": statistics.fmean(values),
                "std": _std(values),
            }
            if name != baseline:
                deltas = [g["branches"][name]["delta"] for g in members if name in g["branches"]]
                entry["paired_delta_mean"] = statistics.fmean(deltas)
                entry["paired_delta_max_abs"] = max(abs(d) for d in deltas)
            branches[name] = entry
        seeds = [g["branches"][baseline]["seed"] for g in members]
        summary.append({"overrides": pool["overrides"], "seeds": seeds, "branches": branches})
    return summary

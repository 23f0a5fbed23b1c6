"""The checks: group runs, then judge each group's branches against the baseline.

Runs are grouped by every command-line override except ``norm`` (the runs' recorded
``overrides``), so a sweep ``norm=reference,triton seed=0,1 model.net.hidden_features=32,64``
gives four groups of two branches. Within a group every branch started from the same seed and
saw the same batches, so it is compared with the baseline branch directly. Every branch must
share the baseline's seed and number of training steps; then the checks ``compare.checks``
lists run, in this order (tolerances from ``conf/compare/``, via :mod:`.tolerances`):

    metric_delta  |metric(branch) - metric(baseline)| <= delta_metric_tolerance  (e.g. test/mse)
    probe         first-batch output and gradient max abs error <= initial_error_tolerance
    curve         max |curve(branch) - curve(baseline)| over the steps both logged
                  <= curve_tolerance  (e.g. train/loss)
    throughput    tokens_per_s, step_time_ms, peak/start memory as recorded, and the ratios
                  speed_ratio = tokens/s(branch) / tokens/s(baseline), memory_ratio = peak
                  memory(branch) / peak memory(baseline) (GPU only): reported, no verdict

The DDP equivalence (:func:`equivalence_pair`) compares two runs of one branch instead (a DDP
run and one process), with the same curve diff and the ``compare.equivalence`` tolerances.

Across seeds (groups that differ only in ``seed``) the summary gives, per branch, the mean and
standard deviation of the metric, and the paired difference branch - baseline (same seed): its
mean and max |delta|.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from safetensors.torch import load_file

from ..exports.checkpoint import INPUTS, PREDICTIONS, max_abs_diff
from .curves import max_curve_delta
from .load import ComparisonError, Run, recorded_path

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
#: What the Throughput callback records (the throughput check's figures).
PERF = ("tokens_per_s", "step_time_ms", "peak_memory_gib", "start_memory_gib")


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


@dataclass
class Branch:
    """One branch of a group while it is judged: its run, the baseline's, what it records
    (``entry``, a branch of comparison.json) and the group's check records."""

    name: str
    run: Run
    base: Run
    settings: dict[str, Any]
    entry: dict[str, Any]
    checks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_baseline(self) -> bool:
        return self.name == self.settings["baseline"]

    def check(self, name: str, value: Any, limit: Any, passed: bool) -> None:
        self.checks.append(
            {
                "name": name,
                "branch": self.name,
                "value": value,
                "limit": limit,
                "passed": bool(passed),
            }
        )


def _ratio(value: Any, base: Any) -> float | None:
    if value is None or base is None or not base:
        return None
    return value / base


def _probe_errors(probe: dict, base: dict) -> tuple[float, float]:
    """Max abs output diff and max abs gradient diff of two first-batch probes."""
    if probe.keys() != base.keys():
        raise ComparisonError(f"probes hold different tensors: {sorted(probe)} vs {sorted(base)}")
    grads = [max_abs_diff(probe[k], base[k]) for k in sorted(probe) if k.startswith("grad.")]
    return max_abs_diff(probe["output"], base["output"]), max(grads, default=0.0)


def check_metric_delta(b: Branch) -> None:
    if b.is_baseline:
        return
    metric, tol = b.settings["metric"], b.settings["delta_metric_tolerance"]
    delta = b.run.metrics[metric] - b.base.metrics[metric]
    b.entry["delta"] = delta
    b.check(f"|delta {metric}|", abs(delta), tol, abs(delta) <= tol)


def check_probe(b: Branch) -> None:
    if b.is_baseline or b.run.probe is None:
        return
    out_err, grad_err = _probe_errors(b.run.probe, b.base.probe)
    b.entry["initial_output_error"], b.entry["initial_grad_error"] = out_err, grad_err
    tol = b.settings["initial_error_tolerance"]
    b.check("initial output error", out_err, tol, out_err <= tol)
    b.check("initial grad error", grad_err, tol, grad_err <= tol)


def check_curve(b: Branch) -> None:
    if b.is_baseline:
        return
    curve, tol = b.settings["curve"], b.settings["curve_tolerance"]
    delta, steps = max_curve_delta(b.run, b.base, curve)
    b.entry["max_curve_delta"], b.entry["curve_steps"] = delta, steps
    b.entry["curve_passed"] = delta <= tol
    b.check(f"max |delta {curve}|", delta, tol, delta <= tol)


def check_throughput(b: Branch) -> None:
    b.entry.update({k: b.run.metrics.get(k) for k in PERF})
    b.entry["speed_ratio"] = _ratio(b.entry["tokens_per_s"], b.base.metrics.get("tokens_per_s"))
    b.entry["memory_ratio"] = _ratio(
        b.entry["peak_memory_gib"], b.base.metrics.get("peak_memory_gib")
    )


#: ``compare.checks`` names -> the check; each runs on every branch of a group.
CHECK_FUNCTIONS: dict[str, Callable[[Branch], None]] = {
    "metric_delta": check_metric_delta,
    "probe": check_probe,
    "curve": check_curve,
    "throughput": check_throughput,
}


def compare_group(
    overrides: dict[str, str], branches: dict[str, Run], settings: dict[str, Any]
) -> dict[str, Any]:
    """``{"overrides", "branches": {norm: {...}}, "checks": [...], "passed"}`` of one group.

    ``settings`` as :func:`.tolerances.compare_settings` returns them.
    """
    baseline, metric = settings["baseline"], settings["metric"]
    if baseline not in branches:
        raise ComparisonError(
            f"group {describe(overrides)} has no baseline branch {baseline!r} "
            f"(branches: {sorted(branches)}); add norm={baseline} to the sweep or set "
            "compare.baseline"
        )
    if len(branches) < 2:
        raise ComparisonError(
            f"group {describe(overrides)} has only its baseline branch {baseline!r}: nothing to "
            "compare it with (sweep norm over at least two branches, e.g. norm=reference,triton)"
        )
    for run in branches.values():
        steps = run.metrics.get("train_steps")
        if not isinstance(steps, int) or steps < 1:
            raise ComparisonError(
                f"{run.dir}: it trained no steps (train_steps {steps!r}; a train=false run?): "
                "the comparison judges training, so every branch must train"
            )
    base = branches[baseline]
    if "probe" in settings["checks"]:
        probes = [r.probe is not None for r in branches.values()]
        if any(probes) and not all(probes):
            missing = [n for n, r in branches.items() if r.probe is None]
            raise ComparisonError(
                f"group {describe(overrides)}: no first-batch probe for {missing}"
            )
    checks: list[dict[str, Any]] = []
    out: dict[str, dict[str, Any]] = {}
    for name, run in branches.items():
        if metric not in run.metrics:
            raise ComparisonError(f"{run.dir}: metrics.json records no {metric!r}")
        entry = {metric: run.metrics[metric], "run_dir": str(run.dir)}
        entry.update({k: run.metrics.get(k) for k in RECORDED})
        branch = Branch(name, run, base, settings, entry, checks)
        for key, what in (("seed", "seed"), ("train_steps", "train steps")):
            want = base.metrics.get(key)
            branch.check(f"same {what} as baseline", entry[key], want, entry[key] == want)
        for check in settings["checks"]:
            CHECK_FUNCTIONS[check](branch)
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
    paired deltas are absent for the baseline (and without the metric_delta check).
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
            deltas = [
                g["branches"][name]["delta"]
                for g in members
                if "delta" in g["branches"].get(name, {})
            ]
            if name != baseline and deltas:
                entry["paired_delta_mean"] = statistics.fmean(deltas)
                entry["paired_delta_max_abs"] = max(abs(d) for d in deltas)
            branches[name] = entry
        seeds = [g["branches"][baseline]["seed"] for g in members]
        summary.append({"overrides": pool["overrides"], "seeds": seeds, "branches": branches})
    return summary


def _weight_diff(a: Run, b: Run) -> float:
    """Max abs difference of any exported weight (not the stored test inputs/predictions)."""
    paths = [recorded_path(r.dir, r.metrics, "checkpoint") for r in (a, b)]
    for run, path in zip((a, b), paths, strict=True):
        if path is None:
            raise ComparisonError(f"{run.dir}: metrics.json records no exported checkpoint")
    ta, tb = (load_file(str(p)) for p in paths)
    keys = [k for k in ta if k not in (INPUTS, PREDICTIONS)]  # the weights only
    if not keys or set(keys) - set(tb):
        raise ComparisonError(f"exports hold different weights: {sorted(ta)} vs {sorted(tb)}")
    return max(max_abs_diff(ta[k], tb[k]) for k in keys)


def equivalence_pair(ddp: Run, single: Run, settings: dict[str, Any]) -> dict[str, Any]:
    """The DDP equivalence check: a DDP run against one process of the same branch.

    ``settings`` as :func:`.tolerances.equivalence_settings` returns them. Returns
    ``{"norm", "world_size": [ddp, single], "metric", "values": [ddp, single],
    "curve_max_abs": {tag: float}, "metric_abs", "weight_max_abs", "tolerances", "passed"}``.
    """
    if ddp.norm != single.norm:
        raise ComparisonError(f"runs of different norms: {ddp.norm!r} vs {single.norm!r}")
    metric, tol = settings["metric"], settings["tolerances"]
    for run in (ddp, single):
        if metric not in run.metrics:
            raise ComparisonError(f"{run.dir}: metrics.json records no {metric!r}")
    curves = {
        tag: max_curve_delta(ddp, single, tag, same_steps=True)[0] for tag in settings["curves"]
    }
    values = [ddp.metrics[metric], single.metrics[metric]]
    result = {
        "norm": ddp.norm,
        "world_size": [ddp.metrics.get("world_size", 1), single.metrics.get("world_size", 1)],
        "metric": metric,
        "values": values,
        "curve_max_abs": curves,
        "metric_abs": abs(values[0] - values[1]),
        "weight_max_abs": None if tol["weight_max_abs"] is None else _weight_diff(ddp, single),
        "tolerances": dict(tol),
    }
    result["passed"] = (
        max(curves.values()) <= tol["curve_max_abs"]
        and result["metric_abs"] <= tol["metric_abs"]
        and (tol["weight_max_abs"] is None or result["weight_max_abs"] <= tol["weight_max_abs"])
    )
    return result

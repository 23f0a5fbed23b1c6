"""``compare_runs``: read a sweep, judge it, write ``comparison.json`` and the PNG; the table.

``comparison.json``::

    baseline, metric, curve, tolerances         the settings used (conf/compare/)
    swept                                       override keys that vary, besides norm
    groups: [{overrides, branches: {<norm>: {<metric>, delta, initial_output_error,
              initial_grad_error, seed, train_steps, forward_calls, backward_calls,
              expected_calls, reload_max_diff, checkpoint, ...}}, checks, passed}]
    summary: [{overrides, seeds, branches: {<norm>: {n, mean, std, paired_delta_mean,
               paired_delta_max_abs}}}]         across seeds (see checks.summarize)
    failed, passed, curves, comparison
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..settings import check_compare_settings
from .checks import compare_group, describe, group_runs, summarize, swept_keys
from .load import ComparisonError, load_run
from .plots import plot_curves

COMPARISON_FILE = "comparison.json"
CURVES_FILE = "loss_curves.png"


def compare_runs(
    run_dirs: Sequence[Path], out_dir: Path, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """Compare every group's branches with the baseline; write the JSON and the PNG to ``out_dir``.

    ``settings`` is the ``compare`` config (checked first). Returns the comparison;
    ``result["passed"]`` is False when any check fails. Raises :class:`ComparisonError` when
    there is nothing to compare or a group has no baseline run.
    """
    settings = check_compare_settings(settings)
    if not run_dirs:
        raise ComparisonError("no finished runs (no */metrics.json) to compare")
    runs = [load_run(Path(d)) for d in run_dirs]
    groups = group_runs(runs)
    results = [compare_group(o, b, settings) for o, b in groups]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_curves(groups, settings, out_dir / CURVES_FILE)
    failed = [
        f"{describe(g['overrides'])} {c['branch']}: {c['name']} = {c['value']} (limit {c['limit']})"
        for g in results
        for c in g["checks"]
        if not c["passed"]
    ]
    result = {
        "baseline": settings["baseline"],
        "metric": settings["metric"],
        "curve": settings["curve"],
        "tolerances": {
            "delta_metric": settings["delta_metric_tolerance"],
            "initial_error": settings["initial_error_tolerance"],
        },
        "swept": swept_keys(runs),
        "groups": results,
        "summary": summarize(results, settings),
        "failed": failed,
        "passed": not failed,
        "curves": str(out_dir / CURVES_FILE),
        "comparison": str(out_dir / COMPARISON_FILE),
    }
    (out_dir / COMPARISON_FILE).write_text(json.dumps(result, indent=2) + "\n")
    return result


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(result: dict[str, Any]) -> str:
    """One row per (group, branch); then the across-seed summary when seeds were swept."""
    base, metric = result["baseline"], result["metric"]
    # One group of every run (nothing but norm swept, as `make train`): no group column.
    grouped = any(g["overrides"] for g in result["groups"])
    names = [describe(g["overrides"]) if grouped else "" for g in result["groups"]]
    width = max(len(n) for n in [*names, "group" if grouped else ""])
    first = f"{'group':<{width}} " if grouped else ""
    head = (
        f"{first}{'branch':<10} {metric:>12} {'Δ vs ' + base:>14} {'fwd':>5} "
        f"{'bwd':>5} {'reload':>7} {'init out':>9} {'init grad':>9}"
    )
    lines = [head, "-" * len(head)]
    for name, group in zip(names, result["groups"], strict=True):
        lead = f"{name:<{width}} " if grouped else ""
        for branch, b in group["branches"].items():
            lines.append(
                f"{lead}{branch:<10} {_fmt(b[metric], '.8f'):>12} "
                f"{_fmt(b.get('delta'), '+.2e'):>14} {_fmt(b.get('forward_calls'), 'd'):>5} "
                f"{_fmt(b.get('backward_calls'), 'd'):>5} "
                f"{_fmt(b.get('reload_max_diff'), '.0e'):>7} "
                f"{_fmt(b.get('initial_output_error'), '.2e'):>9} "
                f"{_fmt(b.get('initial_grad_error'), '.2e'):>9}"
            )
    pooled = [s for s in result["summary"] if len(s["seeds"]) > 1]
    for s in pooled:
        lines.append("")
        where = f" {describe(s['overrides'])}" if s["overrides"] else ""
        lines.append(f"across seeds {s['seeds']}{where}:")
        for branch, b in s["branches"].items():
            paired = ""
            if "paired_delta_mean" in b:
                paired = (
                    f"  paired Δ mean {b['paired_delta_mean']:+.2e}, "
                    f"max |Δ| {b['paired_delta_max_abs']:.2e}"
                )
            lines.append(
                f"  {branch:<10} {metric} mean {b['mean']:.8f} std {_fmt(b['std'], '.2e')}{paired}"
            )
    lines.append("")
    lines.append("PASSED" if result["passed"] else "FAILED: " + "; ".join(result["failed"]))
    return "\n".join(lines)

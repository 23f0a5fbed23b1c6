"""``compare_runs``: read a sweep, run the configured checks, write the JSON files and the PNG.

``comparison.json`` (every sweep)::

    baseline, metric, curve, tolerances         the settings used (conf/compare/)
    swept                                       override keys that vary, besides norm
    groups: [{overrides, branches: {<norm>: {<metric>, delta, initial_output_error,
              initial_grad_error, seed, train_steps, forward_calls, backward_calls,
              expected_calls, reload_max_diff, checkpoint, ...}}, checks, passed}]
    summary: [{overrides, seeds, branches: {<norm>: {n, mean, std, paired_delta_mean,
               paired_delta_max_abs}}}]         across seeds (see checks.summarize)
    failed, passed, curves, comparison

``lm_comparison.json`` (when ``compare.checks`` lists ``throughput``, as the language model's
does): the speed and memory view of the same checks::

    baseline, curve, curve_tolerance
    groups: [{overrides, branches: {<norm>: {tokens_per_s, step_time_ms, peak_memory_gib,
              start_memory_gib, device, speed_ratio, memory_ratio, max_curve_delta,
              curve_steps, curve_passed}}}]
    failed, passed (the curve check), report

A sweep judged again with other settings (``python -m rmsnorm_kernel.cli compare SWEEP
compare.KEY=VALUE``) writes these files with :data:`REJUDGED` in their names
(``comparison_rejudged.json``, ``loss_curves_rejudged.png``, ``lm_comparison_rejudged.json``):
the verdict written when the sweep ran stays as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .checks import PERF, compare_group, describe, group_runs, summarize, swept_keys
from .load import ComparisonError, Run, load_run, saved_compare
from .plots import plot_curves
from .tolerances import compare_settings

COMPARISON_FILE = "comparison.json"
CURVES_FILE = "loss_curves.png"
REPORT_FILE = "lm_comparison.json"
#: The suffix of the files of a sweep judged again with overrides (:func:`output_name`).
REJUDGED = "_rejudged"
#: Per branch in lm_comparison.json: the throughput check's figures, then the curve check's.
LM_KEYS = (*PERF, "device", "speed_ratio", "memory_ratio")
LM_CURVE_KEYS = ("max_curve_delta", "curve_steps", "curve_passed")


def _check_curve_logged(runs: list, tag: str) -> None:
    """The PNG's curve (``compare.curve``) must be one every run logged: a misspelled tag used to
    PASS with empty axes (the curve check, which would refuse it, is not a default check)."""
    missing = [str(r.dir) for r in runs if tag not in r.curves]
    if missing and any(r.curves for r in runs):  # (runs without a logger log no curve at all)
        logged = sorted(set().union(*(r.curves for r in runs)))
        raise ComparisonError(
            f"compare.curve={tag!r}: not logged by {len(missing)} of {len(runs)} runs "
            f"(first {missing[0]}); logged curves: {', '.join(logged) or 'none'}"
        )


def output_name(name: str, suffix: str = "") -> str:
    """``name`` with ``suffix`` before its extension (``comparison.json`` ->
    ``comparison_rejudged.json``)."""
    path = Path(name)
    return f"{path.stem}{suffix}{path.suffix}"


def _group_settings(
    overrides: dict[str, str],
    branches: dict[str, Run],
    settings: Mapping[str, Any],
    adjust: Callable[[dict], dict] | None,
) -> dict[str, Any]:
    """The compare config of one group: its runs' own (saved with each run), which must agree,
    else ``settings``; ``adjust`` (command-line overrides) applied on top; checked."""
    saved = {name: saved_compare(run.dir) for name, run in branches.items()}
    known = [c for c in saved.values() if c is not None]
    if any(c != known[0] for c in known[1:]):
        differ = sorted(n for n, c in saved.items() if c != known[0])
        raise ComparisonError(
            f"group {describe(overrides)}: its runs were configured with different compare "
            f"sections ({differ} differ from the others); compare them in separate sweeps"
        )
    chosen = dict(known[0]) if known else dict(settings)
    return compare_settings(adjust(chosen) if adjust else chosen)


def compare_runs(
    run_dirs: Sequence[Path],
    out_dir: Path,
    settings: Mapping[str, Any],
    per_run: bool = False,
    adjust: Callable[[dict], dict] | None = None,
    suffix: str = "",
) -> dict[str, Any]:
    """Run the configured checks on every group; write the JSON file(s) and the PNG to ``out_dir``
    (their names with ``suffix`` before the extension: :func:`output_name`).

    ``settings`` is the ``compare`` config (checked first). With ``per_run``, each group is
    judged with the compare config its runs were configured with (their saved Hydra config: a
    sweep over ``experiment=a,b`` judges each experiment by its own baseline and tolerances;
    ``settings`` only where a run saved none), ``adjust`` applied to it. Returns the comparison
    (with ``result["lm"]``, the content of ``lm_comparison.json``, when the throughput check
    ran); ``result["passed"]`` is False when any check fails. Raises :class:`ComparisonError`
    when there is nothing to compare or a group has no baseline run.
    """
    settings = compare_settings(settings)
    if not run_dirs:
        raise ComparisonError("no finished runs (no */metrics.json) to compare")
    runs = [load_run(Path(d)) for d in run_dirs]
    groups = group_runs(runs)
    judged = [_group_settings(o, b, settings, adjust) if per_run else settings for o, b in groups]
    results = [compare_group(o, b, s) for (o, b), s in zip(groups, judged, strict=True)]
    for result, s in zip(results, judged, strict=True):
        result["tolerances"] = _tolerances(s)
    settings = judged[0]  # the table, PNG and top-level fields: the first group's
    _check_curve_logged(runs, settings["curve"])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    curves_path, comparison_path, report_path = (
        out_dir / output_name(name, suffix) for name in (CURVES_FILE, COMPARISON_FILE, REPORT_FILE)
    )
    plot_curves(groups, settings, curves_path)
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
        "tolerances": _tolerances(settings),
        "swept": swept_keys(runs),
        "groups": results,
        "summary": summarize(results, settings),
        "failed": failed,
        "passed": not failed,
        "curves": str(curves_path),
        "comparison": str(comparison_path),
    }
    comparison_path.write_text(json.dumps(result, indent=2) + "\n")
    if "throughput" in settings["checks"]:
        lm = lm_report(results, settings, report_path)
        report_path.write_text(json.dumps(lm, indent=2) + "\n")
        result["lm"] = lm  # not in comparison.json: lm_comparison.json holds it
    return result


def _tolerances(settings: dict[str, Any]) -> dict[str, float]:
    tolerances = {
        "delta_metric": settings["delta_metric_tolerance"],
        "initial_error": settings["initial_error_tolerance"],
    }
    if "curve" in settings["checks"]:
        tolerances["curve"] = settings["curve_tolerance"]
    return tolerances


def lm_report(groups: list[dict[str, Any]], settings: dict[str, Any], path: Path) -> dict:
    """The speed, memory and curve view of judged groups (the content of lm_comparison.json).
    Each group carries the curve tolerance it was judged with (groups of a sweep over
    experiments may differ); the top-level one is the first group's."""
    curve, tol = settings["curve"], settings.get("curve_tolerance")
    out = []
    for group in groups:
        branches = {
            name: {k: b[k] for k in (*LM_KEYS, *LM_CURVE_KEYS) if k in b}
            for name, b in group["branches"].items()
        }
        group_tol = group.get("tolerances", {}).get("curve", tol)
        out.append(
            {"overrides": group["overrides"], "curve_tolerance": group_tol, "branches": branches}
        )
    failed = [
        f"{describe(g['overrides'])} {n}: max |delta {curve}| {b['max_curve_delta']:.3g} "
        f"> {g['curve_tolerance']}"
        for g in out
        for n, b in g["branches"].items()
        if b.get("curve_passed") is False
    ]
    return {
        "baseline": settings["baseline"],
        "curve": curve,
        "curve_tolerance": tol,
        "groups": out,
        "failed": failed,
        "passed": not failed,
        "report": str(path),
    }


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


def format_result(result: dict[str, Any]) -> str:
    """What the end-of-sweep callback prints: the speed and memory table and the path of
    lm_comparison.json (throughput check only), the comparison's table ending in PASSED/FAILED,
    the PNG, and as the last line the path of comparison.json."""
    lines = []
    if "lm" in result:
        lines += [format_lm_table(result["lm"]), result["lm"]["report"], ""]
    lines += [format_table(result), f"curves: {result['curves']}", result["comparison"]]
    return "\n".join(lines)


def format_lm_table(lm: dict[str, Any]) -> str:
    """One row per (group, branch): tokens/s, step time, memory, ratios, curve delta."""
    base, curve = lm["baseline"], lm["curve"]
    width = max([5, *(len(describe(g["overrides"])) for g in lm["groups"])])
    head = (
        f"{'group':<{width}} {'branch':<12} {'tokens/s':>10} {'step ms':>9} {'start GiB':>9} "
        f"{'peak GiB':>9} {'speed/' + base:>10} {'mem/' + base:>9} {'max |Δ ' + curve + '|':>20}"
    )
    lines = [head, "-" * len(head)]
    for group in lm["groups"]:
        name = describe(group["overrides"])
        for branch, b in group["branches"].items():
            lines.append(
                f"{name:<{width}} {branch:<12} {_fmt(b['tokens_per_s'], '.0f'):>10} "
                f"{_fmt(b['step_time_ms'], '.1f'):>9} {_fmt(b['start_memory_gib'], '.2f'):>9} "
                f"{_fmt(b['peak_memory_gib'], '.2f'):>9} "
                f"{_fmt(b['speed_ratio'], '.3f'):>10} {_fmt(b['memory_ratio'], '.3f'):>9} "
                f"{_fmt(b.get('max_curve_delta'), '.2e'):>20}"
            )
    lines.append("")
    lines.append("LM PASSED" if lm["passed"] else "LM FAILED: " + "; ".join(lm["failed"]))
    return "\n".join(lines)

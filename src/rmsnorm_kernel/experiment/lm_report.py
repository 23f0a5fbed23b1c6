"""Speed, memory and loss-curve agreement of a language-model sweep, per group, against a baseline.

Reads the runs the sweep comparison reads (``compare.load``) and groups them the same way
(``compare.checks.group_runs``: by every swept override except ``norm``). Per branch:

    tokens_per_s, step_time_ms, peak_memory_gib, start_memory_gib   as Throughput recorded them
    speed_ratio   = tokens_per_s(branch) / tokens_per_s(baseline)
    memory_ratio  = peak_memory_gib(branch) / peak_memory_gib(baseline)    (GPU only)
    max |delta curve|  over the steps both logged        <= compare.curve_tolerance

Writes ``lm_comparison.json`` to the sweep dir and prints a table. The curve check is the only
verdict here; ratios are reported as measured. ``python -m rmsnorm_kernel.experiment.lm_report
<sweep dir>`` reruns it on a finished sweep.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from .compare.checks import describe, group_runs
from .compare.load import ComparisonError, Run, find_runs, load_run

REPORT_FILE = "lm_comparison.json"
PERF = ("tokens_per_s", "step_time_ms", "peak_memory_gib", "start_memory_gib")


def _ratio(value: Any, base: Any) -> float | None:
    if value is None or base is None or not base:
        return None
    return value / base


def max_curve_delta(run: Run, base: Run, tag: str) -> tuple[float, int]:
    """``(max |run - base|, number of common steps)`` of curve ``tag``."""
    if tag not in run.curves or tag not in base.curves:
        raise ComparisonError(f"{run.dir} or {base.dir}: no {tag!r} curve logged")
    base_at = dict(zip(*base.curves[tag], strict=True))
    deltas = [abs(v - base_at[s]) for s, v in zip(*run.curves[tag], strict=True) if s in base_at]
    if not deltas:
        raise ComparisonError(f"{run.dir}: no step of {tag!r} in common with {base.dir}")
    return max(deltas), len(deltas)


def lm_report(sweep_dir: Path, baseline: str, curve: str, curve_tolerance: float) -> dict:
    """Judge and summarise the sweep in ``sweep_dir``; writes ``REPORT_FILE`` there."""
    if not (isinstance(curve_tolerance, (int, float)) and math.isfinite(curve_tolerance)):
        raise ValueError(f"compare.curve_tolerance must be a finite number (got {curve_tolerance})")
    if curve_tolerance < 0:
        raise ValueError(f"compare.curve_tolerance must be >= 0 (got {curve_tolerance})")
    runs = [load_run(d) for d in find_runs(Path(sweep_dir))]
    if not runs:
        raise ComparisonError(f"no finished runs (no */metrics.json) under {sweep_dir}")
    groups = []
    for overrides, branches in group_runs(runs):
        if baseline not in branches:
            raise ComparisonError(
                f"group {describe(overrides)} has no baseline branch {baseline!r} "
                f"(branches: {sorted(branches)})"
            )
        base = branches[baseline]
        out = {}
        for name, run in branches.items():
            entry = {k: run.metrics.get(k) for k in PERF}
            entry["device"] = run.metrics.get("device")
            entry["speed_ratio"] = _ratio(entry["tokens_per_s"], base.metrics.get("tokens_per_s"))
            entry["memory_ratio"] = _ratio(
                entry["peak_memory_gib"], base.metrics.get("peak_memory_gib")
            )
            if name != baseline:
                delta, steps = max_curve_delta(run, base, curve)
                entry["max_curve_delta"], entry["curve_steps"] = delta, steps
                entry["curve_passed"] = delta <= curve_tolerance
            out[name] = entry
        groups.append({"overrides": overrides, "branches": out})
    failed = [
        f"{describe(g['overrides'])} {n}: max |delta {curve}| {b['max_curve_delta']:.3g} > "
        f"{curve_tolerance}"
        for g in groups
        for n, b in g["branches"].items()
        if b.get("curve_passed") is False
    ]
    result = {
        "baseline": baseline,
        "curve": curve,
        "curve_tolerance": curve_tolerance,
        "groups": groups,
        "failed": failed,
        "passed": not failed,
        "report": str(Path(sweep_dir) / REPORT_FILE),
    }
    Path(result["report"]).write_text(json.dumps(result, indent=2) + "\n")
    return result


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_report(result: dict) -> str:
    """One row per (group, branch): tokens/s, step time, memory, ratios, curve delta."""
    base, curve = result["baseline"], result["curve"]
    width = max([5, *(len(describe(g["overrides"])) for g in result["groups"])])
    head = (
        f"{'group':<{width}} {'branch':<12} {'tokens/s':>10} {'step ms':>9} {'start GiB':>9} "
        f"{'peak GiB':>9} {'speed/' + base:>10} {'mem/' + base:>9} {'max |Δ ' + curve + '|':>20}"
    )
    lines = [head, "-" * len(head)]
    for group in result["groups"]:
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
    lines.append("LM PASSED" if result["passed"] else "LM FAILED: " + "; ".join(result["failed"]))
    return "\n".join(lines)


class LMReportOnMultirunEnd(Callback):
    """Hydra callback: the LM report after a multirun, before the sweep comparison prints.

    Exits 1 (``SystemExit``, which Hydra does not swallow) when a curve is out of tolerance or
    the sweep cannot be read.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        settings = OmegaConf.to_container(config.compare, resolve=True)
        try:
            result = lm_report(
                Path(config.hydra.sweep.dir),
                settings["baseline"],
                settings["curve"],
                settings["curve_tolerance"],
            )
        except Exception as e:  # noqa: BLE001 - any failure to report fails the sweep
            print(f"LM report failed: {type(e).__name__}: {e}", file=sys.stderr)
            raise SystemExit(1) from e
        print(format_report(result))
        print(result["report"], flush=True)
        if not result["passed"]:
            raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    """``python -m rmsnorm_kernel.experiment.lm_report <sweep dir>``: the report again, with the
    compare settings the sweep ran with (its ``multirun.yaml``)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m rmsnorm_kernel.experiment.lm_report <sweep dir>", file=sys.stderr)
        return 2
    sweep_dir = Path(args[0])
    saved = sweep_dir / "multirun.yaml"
    if not saved.is_file():
        print(f"{saved}: not found (not a finished multirun sweep dir)", file=sys.stderr)
        return 2
    compare = OmegaConf.to_container(OmegaConf.load(saved).compare, resolve=True)
    result = lm_report(sweep_dir, compare["baseline"], compare["curve"], compare["curve_tolerance"])
    print(format_report(result))
    print(result["report"])
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The cross-branch verdict of a sweep: curves PNG, ``comparison.json``, a table, an exit code.

After ``python -m rmsnorm_kernel.train --multirun norm=reference,triton`` each run dir holds
``metrics.json`` (from ``train(cfg)``), ``initial_probe.safetensors`` (first-batch outputs and
gradients) and TensorBoard event files. :func:`compare_runs` reads them (the curves with tbparse)
and compares every branch with the baseline (``compare.baseline``, ``reference``)::

    comparison.json
      branches.<norm>: test_mse, forward_calls, backward_calls, expected_calls, train_steps,
                       reload_max_diff, initial_output_error, initial_grad_error, delta_test_mse
      initial_output_error, initial_grad_error, delta_test_mse: {<norm>: value} (non-baseline)
      checks: [{name, branch, value, limit, passed}], passed
    loss_curves.png   train/loss (and val/loss) of every branch, and branch - baseline

:class:`CompareOnMultirunEnd` runs it as a Hydra callback and exits non-zero when it fails.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt  # noqa: E402
from hydra.experimental.callback import Callback  # noqa: E402
from omegaconf import DictConfig  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from tbparse import SummaryReader  # noqa: E402

from .checkpoint import max_abs_diff  # noqa: E402
from .run import METRICS_FILE  # noqa: E402

COMPARISON_FILE = "comparison.json"
CURVES_FILE = "loss_curves.png"
PROBE_FILE = "initial_probe.safetensors"


class ComparisonError(RuntimeError):
    """The sweep cannot be compared (missing runs, files or baseline)."""


def find_runs(sweep_dir: Path) -> list[Path]:
    """Run dirs of a sweep (those with ``metrics.json``), in job order."""
    runs = [p.parent for p in Path(sweep_dir).glob(f"*/{METRICS_FILE}")]

    def job_num(p: Path) -> tuple[int, str]:
        head = p.name.split("_", 1)[0]
        return (int(head) if head.isdigit() else 1 << 30, p.name)

    return sorted(runs, key=job_num)


def read_curves(run_dir: Path) -> dict[str, tuple[list[int], list[float]]]:
    """``{tag: (steps, values)}`` of every scalar in the run's TensorBoard logs."""
    with warnings.catch_warnings():  # tbparse calls pandas APIs pandas now deprecates
        warnings.simplefilter("ignore")
        frame = SummaryReader(str(run_dir / "tensorboard")).scalars
    if frame.empty:
        raise ComparisonError(f"{run_dir}: no TensorBoard scalars under {run_dir / 'tensorboard'}")
    curves = {}
    for tag, group in frame.groupby("tag"):
        group = group.sort_values("step").drop_duplicates("step", keep="last")
        curves[str(tag)] = (
            group["step"].astype(int).tolist(),
            group["value"].astype(float).tolist(),
        )
    return curves


def _load_run(run_dir: Path) -> dict[str, Any]:
    metrics = json.loads((run_dir / METRICS_FILE).read_text())
    probe_path = run_dir / PROBE_FILE
    if not probe_path.is_file():
        raise ComparisonError(f"{run_dir}: missing {PROBE_FILE} (the InitialProbe callback)")
    return {
        "dir": run_dir,
        "metrics": metrics,
        "curves": read_curves(run_dir),
        "probe": load_file(str(probe_path)),
    }


def _probe_errors(probe: dict, base: dict) -> tuple[float, dict[str, float]]:
    """Max abs output diff and per-gradient max abs diffs of two first-batch probes."""
    if probe.keys() != base.keys():
        raise ComparisonError(f"probes hold different tensors: {sorted(probe)} vs {sorted(base)}")
    grads = {k: max_abs_diff(probe[k], base[k]) for k in sorted(probe) if k.startswith("grad.")}
    return max_abs_diff(probe["output"], base["output"]), grads


def plot_curves(runs: dict[str, dict], baseline: str, path: Path) -> None:
    """Top: train/loss (solid) and val/loss (dashed) per branch. Bottom: train/loss - baseline."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    base_steps, base_loss = runs[baseline]["curves"]["train/loss"]
    base_at = dict(zip(base_steps, base_loss, strict=True))
    for name, run in runs.items():
        steps, loss = run["curves"]["train/loss"]
        # The baseline wide and underneath, so identical curves still show both branches.
        wide = name == baseline
        (line,) = top.plot(
            steps,
            loss,
            label=f"{name} train/loss",
            lw=3.0 if wide else 1.2,
            zorder=1 if wide else 2,
        )
        if "val/loss" in run["curves"]:
            vs, vl = run["curves"]["val/loss"]
            top.plot(
                vs, vl, ls="--", marker="o", ms=3, color=line.get_color(), label=f"{name} val/loss"
            )
        if name != baseline:
            common = [s for s in steps if s in base_at]
            diff = [v - base_at[s] for s, v in zip(steps, loss, strict=True) if s in base_at]
            bottom.plot(common, diff, color=line.get_color(), label=f"{name} - {baseline}")
    top.set_ylabel("MSE")
    top.set_yscale("log")
    top.legend(fontsize=8)
    top.set_title("Training loss per branch (same seed, same batches)")
    bottom.axhline(0.0, color="grey", lw=0.8)
    bottom.set_xlabel("step")
    bottom.set_ylabel(f"train/loss - {baseline}")
    if len(runs) > 1:
        bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare_runs(
    run_dirs: Sequence[Path],
    out_dir: Path,
    baseline: str = "reference",
    delta_test_mse_tolerance: float = 1e-3,
    initial_error_tolerance: float = 1e-5,
) -> dict[str, Any]:
    """Compare every run with the baseline branch; write ``comparison.json`` and the curves PNG.

    Returns the comparison (also in ``out_dir/comparison.json``); ``result["passed"]`` is False
    when any check fails. Raises :class:`ComparisonError` when there is nothing to compare.
    """
    runs: dict[str, dict] = {}
    for run_dir in run_dirs:
        run = _load_run(Path(run_dir))
        name = run["metrics"]["norm"]
        if name in runs:
            raise ComparisonError(
                f"two runs of norm {name!r} ({runs[name]['dir']}, {run_dir}): compare one run "
                "per branch (sweep seeds in separate multiruns)"
            )
        runs[name] = run
    if baseline not in runs:
        raise ComparisonError(f"baseline branch {baseline!r} not among the runs {sorted(runs)}")

    checks: list[dict[str, Any]] = []

    def check(name: str, branch: str, value: Any, limit: Any, passed: bool) -> None:
        checks.append(
            {"name": name, "branch": branch, "value": value, "limit": limit, "passed": bool(passed)}
        )

    base = runs[baseline]
    branches: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        m = run["metrics"]
        tb_test = run["curves"].get("test/mse", ([], [float("nan")]))[1][-1]
        entry = {
            "test_mse": m.get("test_mse", tb_test),
            "forward_calls": m.get("forward_calls"),
            "backward_calls": m.get("backward_calls"),
            "expected_calls": m.get("expected_calls"),
            "train_steps": m.get("train_steps"),
            "reload_max_diff": m.get("reload_max_diff"),
            "seed": m.get("seed"),
            "device": m.get("device"),
            "wall_time_s": m.get("wall_time_s"),
            "checkpoint": m.get("checkpoint"),
            "run_dir": str(run["dir"]),
        }
        check(
            "test/mse logged in TensorBoard",
            name,
            tb_test,
            entry["test_mse"],
            math.isfinite(tb_test) and abs(tb_test - entry["test_mse"]) <= 1e-6 * abs(tb_test),
        )
        calls = (entry["forward_calls"], entry["backward_calls"])
        check(
            "kernel calls (forward, backward)",
            name,
            list(calls),
            entry["expected_calls"],
            entry["expected_calls"] is not None and calls == (entry["expected_calls"],) * 2,
        )
        check(
            "reload max diff", name, entry["reload_max_diff"], 0.0, entry["reload_max_diff"] == 0.0
        )
        check(
            "same seed as baseline",
            name,
            entry["seed"],
            base["metrics"].get("seed"),
            entry["seed"] == base["metrics"].get("seed"),
        )
        check(
            "same train steps as baseline",
            name,
            entry["train_steps"],
            base["metrics"].get("train_steps"),
            entry["train_steps"] == base["metrics"].get("train_steps"),
        )
        if name != baseline:
            out_err, grad_errs = _probe_errors(run["probe"], base["probe"])
            entry["initial_output_error"] = out_err
            entry["initial_grad_error"] = max(grad_errs.values(), default=0.0)
            entry["initial_grad_errors"] = grad_errs
            entry["delta_test_mse"] = entry["test_mse"] - base["metrics"].get("test_mse", tb_test)
            check(
                "initial output error",
                name,
                out_err,
                initial_error_tolerance,
                out_err <= initial_error_tolerance,
            )
            check(
                "initial grad error",
                name,
                entry["initial_grad_error"],
                initial_error_tolerance,
                entry["initial_grad_error"] <= initial_error_tolerance,
            )
            check(
                "|delta test MSE|",
                name,
                abs(entry["delta_test_mse"]),
                delta_test_mse_tolerance,
                abs(entry["delta_test_mse"]) <= delta_test_mse_tolerance,
            )
        branches[name] = entry

    others = [n for n in branches if n != baseline]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_curves(runs, baseline, out_dir / CURVES_FILE)
    result = {
        "baseline": baseline,
        "tolerances": {
            "delta_test_mse": delta_test_mse_tolerance,
            "initial_error": initial_error_tolerance,
        },
        "branches": branches,
        "initial_output_error": {n: branches[n]["initial_output_error"] for n in others},
        "initial_grad_error": {n: branches[n]["initial_grad_error"] for n in others},
        "delta_test_mse": {n: branches[n]["delta_test_mse"] for n in others},
        "checks": checks,
        "failed": [
            f"{c['branch']}: {c['name']} = {c['value']} (limit {c['limit']})"
            for c in checks
            if not c["passed"]
        ],
        "passed": all(c["passed"] for c in checks),
        "curves": str(out_dir / CURVES_FILE),
        "comparison": str(out_dir / COMPARISON_FILE),
    }
    (out_dir / COMPARISON_FILE).write_text(json.dumps(result, indent=2) + "\n")
    return result


def format_table(result: dict[str, Any]) -> str:
    """A short fixed-width table of the comparison, one row per branch."""
    base = result["baseline"]
    head = (
        f"{'branch':<10} {'test MSE':>10} {'Δ vs ' + base:>14} {'fwd':>5} {'bwd':>5} "
        f"{'reload':>7} {'init out':>9} {'init grad':>9}"
    )
    lines = [head, "-" * len(head)]

    def g(b: dict[str, Any], key: str, fmt: str = ".2e") -> str:
        v = b.get(key)
        return "-" if v is None else format(v, fmt)

    for name, b in result["branches"].items():
        lines.append(
            f"{name:<10} {g(b, 'test_mse', '.6f'):>10} {g(b, 'delta_test_mse', '+.2e'):>14} "
            f"{g(b, 'forward_calls', 'd'):>5} {g(b, 'backward_calls', 'd'):>5} "
            f"{g(b, 'reload_max_diff', '.0e'):>7} {g(b, 'initial_output_error'):>9} "
            f"{g(b, 'initial_grad_error'):>9}"
        )
    lines.append("")
    lines.append("PASSED" if result["passed"] else "FAILED: " + "; ".join(result["failed"]))
    return "\n".join(lines)


class CompareOnMultirunEnd(Callback):
    """Hydra callback: compares the sweep's runs once every job has finished.

    Prints the table and, as the last line, the path of ``comparison.json``. Hydra turns
    exceptions raised in callbacks into warnings, so failure leaves through ``SystemExit(1)``,
    which it does not catch: the process exits non-zero.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        settings = config.get("compare") or {}
        try:
            result = compare_runs(
                find_runs(sweep_dir),
                sweep_dir,
                baseline=settings.get("baseline", "reference"),
                delta_test_mse_tolerance=float(settings.get("delta_test_mse_tolerance", 1e-3)),
                initial_error_tolerance=float(settings.get("initial_error_tolerance", 1e-5)),
            )
        except Exception as e:  # noqa: BLE001 - any failure to compare fails the sweep
            print(f"comparison failed for {sweep_dir}: {type(e).__name__}: {e}", file=sys.stderr)
            raise SystemExit(1) from e
        print(format_table(result))
        print(f"curves: {result['curves']}")
        print(result["comparison"], flush=True)
        if not result["passed"]:
            raise SystemExit(1)

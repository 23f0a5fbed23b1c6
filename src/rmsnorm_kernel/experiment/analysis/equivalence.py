"""Did a DDP sweep train like one process? Two sweeps of the same branches, paired by norm.

Each pair (a DDP run and the one-process run of the same norm) goes through the DDP equivalence
check (:func:`.checks.equivalence_pair`): the curves of ``compare.equivalence.curves`` at every
logged step, ``compare.metric`` and every exported weight, against the ``compare.equivalence``
tolerances (``conf/compare/default.yaml``). The command is ``python -m rmsnorm_kernel.cli
equivalence DDP_SWEEP SINGLE_SWEEP``; it exits 1 when any pair differs beyond a tolerance.

The first sweep is the multi-process side: each of its runs must have run under DDP (its
``metrics.json`` records ``world_size`` > 1), and each pair must differ in world size; otherwise
the sweeps are refused (:class:`~..core.settings.SettingsError`, exit 2) before any check: two
one-process sweeps would only show that a sweep equals its own rerun.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.settings import SettingsError
from .checks import equivalence_pair
from .load import ComparisonError, Run, load_run, sweep_runs
from .tolerances import equivalence_settings


def _by_norm(sweep_dir: Path) -> dict[str, Run]:
    runs = [load_run(d) for d in sweep_runs(Path(sweep_dir))]  # every job finished
    by_norm = {r.norm: r for r in runs}
    if not runs or len(by_norm) != len(runs):
        raise ComparisonError(
            f"{sweep_dir}: expected one finished run per norm (found {len(runs)})"
        )
    return by_norm


def world_size(run: Run) -> int:
    """The number of processes the run trained with, as its ``metrics.json`` records it (a run
    recording none ran in one process)."""
    return run.metrics.get("world_size", 1)


def check_world_sizes(ddp: Mapping[str, Run], single: Mapping[str, Run]) -> None:
    """Refuse sweeps that cannot show DDP equivalence: a run of the first (DDP) sweep that ran in
    one process, or a norm both sweeps ran with the same number of processes. Raises
    :class:`SettingsError` naming the argument, the rule and the run."""
    for norm in sorted(ddp):
        if world_size(ddp[norm]) < 2:
            raise SettingsError(
                "ddp_sweep (the first argument) must be a sweep of multi-process (DDP) runs, "
                f"world_size > 1; its run {ddp[norm].dir} ran with world_size "
                f"{world_size(ddp[norm])} (usage: equivalence DDP_SWEEP SINGLE_SWEEP)"
            )
    for norm in sorted(ddp.keys() & single.keys()):
        if world_size(ddp[norm]) == world_size(single[norm]):
            raise SettingsError(
                "single_sweep must have run with another world size than ddp_sweep (a DDP sweep "
                f"against fewer processes); norm {norm!r} ran with world_size "
                f"{world_size(ddp[norm])} in both ({ddp[norm].dir}, {single[norm].dir})"
            )


def compare_sweeps(ddp_dir: Path, single_dir: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"pairs": [equivalence_pair, ...] (sorted by norm), "passed"}`` of two sweeps with one
    run per norm each; ``settings`` is the ``compare`` config. Raises :class:`SettingsError`
    when the sweeps' world sizes cannot show DDP equivalence (:func:`check_world_sizes`)."""
    checked = equivalence_settings(settings)
    ddp, single = _by_norm(ddp_dir), _by_norm(single_dir)
    check_world_sizes(ddp, single)
    if ddp.keys() != single.keys():
        raise ComparisonError(f"the sweeps ran different norms: {sorted(ddp)} vs {sorted(single)}")
    pairs = [equivalence_pair(ddp[n], single[n], checked) for n in sorted(ddp)]
    return {"pairs": pairs, "passed": all(p["passed"] for p in pairs)}


def format_pairs(result: dict[str, Any]) -> str:
    """One line per pair, then PASSED, or FAILED with the tolerances."""
    lines = []
    for p in result["pairs"]:
        curves = ", ".join(f"{k} {v:.2e}" for k, v in p["curve_max_abs"].items())
        w = p["weight_max_abs"]
        weights = "not compared (no export)" if w is None else f"{w:.2e}"
        lines.append(
            f"{p['norm']:>10}  {p['world_size'][0]} vs {p['world_size'][1]} processes  "
            f"{p['metric']} {p['values'][0]:.10f} vs {p['values'][1]:.10f} "
            f"(|delta| {p['metric_abs']:.2e})  max |delta| {curves}, "
            f"weights {weights}  {'PASSED' if p['passed'] else 'FAILED'}"
        )
    tolerances = result["pairs"][0]["tolerances"] if result["pairs"] else {}
    lines.append("PASSED" if result["passed"] else f"FAILED (tolerances {tolerances})")
    return "\n".join(lines)

"""The curves PNG of a sweep: one column per group, or mean +- band when only seeds vary.

Top row: the training curve (``compare.curve``, e.g. ``train/loss``) of every branch, log scale,
and ``val/loss`` dashed when logged. Bottom row: branch - baseline at the same steps, which is
where a correct kernel shows float32 noise and a wrong one a trend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .checks import describe  # noqa: E402
from .curves import curve_diff  # noqa: E402
from .load import Run  # noqa: E402

MAX_COLUMNS = 4


def _group_panel(top, bottom, branches: dict[str, Run], baseline: str, tag: str) -> None:
    for name, run in branches.items():
        if tag not in run.curves:
            continue
        wide = name == baseline  # underneath and wider, so identical curves still show both
        steps, values = run.curves[tag]
        (line,) = top.plot(
            steps, values, label=name, lw=3.0 if wide else 1.2, zorder=1 if wide else 2
        )
        if "val/loss" in run.curves and tag != "val/loss":
            top.plot(*run.curves["val/loss"], ls="--", marker="o", ms=3, color=line.get_color())
        if not wide and tag in branches[baseline].curves:
            bottom.plot(
                *curve_diff(run, branches[baseline], tag), color=line.get_color(), label=name
            )


def _band_panel(top, bottom, groups: list[dict[str, Run]], baseline: str, tag: str) -> None:
    """Mean +- std across seeds, per branch; bottom: paired branch - baseline, mean +- std."""
    names = list(dict.fromkeys(n for g in groups for n in g))
    for name in names:
        runs = [g[name] for g in groups if name in g and tag in g[name].curves]
        if not runs:
            continue
        steps = runs[0].curves[tag][0]
        values = np.array([r.curves[tag][1] for r in runs if r.curves[tag][0] == steps])
        mean, std = values.mean(0), values.std(0)
        wide = name == baseline  # underneath and wider, so identical curves still show both
        (line,) = top.plot(
            steps,
            mean,
            label=f"{name} (mean of {len(values)} seeds)",
            lw=3.0 if wide else 1.2,
            zorder=1 if wide else 2,
        )
        top.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.25)
        if name == baseline:
            continue
        diffs = [
            curve_diff(g[name], g[baseline], tag) for g in groups if name in g and baseline in g
        ]
        dsteps = diffs[0][0]
        dvalues = np.array([d[1] for d in diffs if d[0] == dsteps])
        dmean, dstd = dvalues.mean(0), dvalues.std(0)
        bottom.plot(dsteps, dmean, color=line.get_color(), label=f"{name} (paired mean)")
        bottom.fill_between(dsteps, dmean - dstd, dmean + dstd, color=line.get_color(), alpha=0.25)


def plot_curves(
    groups: list[tuple[dict[str, str], dict[str, Run]]], settings: dict[str, Any], path: Path
) -> None:
    """Write the PNG to ``path``. ``groups`` as from :func:`~.checks.group_runs`."""
    baseline, tag = settings["baseline"], settings["curve"]
    only_seeds = len(groups) > 1 and all(set(o) == {"seed"} for o, _ in groups)
    panels = (
        [("across seeds " + ",".join(o["seed"] for o, _ in groups), None)]
        if only_seeds
        else [(describe(o), b) for o, b in groups]
    )
    cols = min(len(panels), MAX_COLUMNS)
    rows = -(-len(panels) // MAX_COLUMNS)
    fig, axes = plt.subplots(
        2 * rows, cols, figsize=(max(8, 5 * cols), 6 * rows), sharex="col", squeeze=False
    )
    for i, (title, branches) in enumerate(panels):
        top, bottom = axes[2 * (i // cols), i % cols], axes[2 * (i // cols) + 1, i % cols]
        if branches is None:
            _band_panel(top, bottom, [b for _, b in groups], baseline, tag)
        else:
            _group_panel(top, bottom, branches, baseline, tag)
        top.set_title(title, fontsize=9)
        top.set_yscale("log")
        top.set_ylabel(tag)
        top.legend(fontsize=7)
        bottom.axhline(0.0, color="grey", lw=0.8)
        bottom.set_xlabel("step")
        bottom.set_ylabel(f"{tag} - {baseline}")
        if bottom.get_legend_handles_labels()[0]:
            bottom.legend(fontsize=7)
    for j in range(len(panels), rows * cols):  # unused cells of the last row
        axes[2 * (j // cols), j % cols].axis("off")
        axes[2 * (j // cols) + 1, j % cols].axis("off")
    what = "mean +- std across seeds" if only_seeds else "dashed: val/loss"
    fig.suptitle(f"{tag} per branch ({what}); below: branch - {baseline}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

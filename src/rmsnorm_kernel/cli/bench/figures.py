"""PNG bandwidth curves from a ``bench`` payload (the JSON ``bench`` writes, or its dict).

One figure per timing mode of the curves: rows = against N (fixed M*N) and against M (fixed N),
columns = passes; one line per implementation in GB/s, the copy ceiling dashed.
"""

from __future__ import annotations

from pathlib import Path

from rmsnorm_kernel.cli.bench.report import PASS_SHORT

AXIS = {"curve_n": ("n", "N (row width)"), "curve_m": ("m", "M (rows)")}


PEER_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:gray")


def plot_curves(payload: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g in payload["groups"] if g["section"] in AXIS]
    made = []
    for mode in dict.fromkeys(g["mode"] for g in groups):
        sel = [g for g in groups if g["mode"] == mode]
        sections = [s for s in AXIS if any(g["section"] == s for g in sel)]
        passes = list(dict.fromkeys(g["pass"] for g in sel))
        fig, axes = plt.subplots(
            len(sections),
            len(passes),
            squeeze=False,
            figsize=(6.5 * len(passes), 4.2 * len(sections)),
        )
        copy = payload["copy_ceiling"].get(mode, {}).get("gb_per_s")
        for row, section in enumerate(sections):
            key, label = AXIS[section]
            for col, pass_ in enumerate(passes):
                ax = axes[row, col]
                points = [g for g in sel if g["section"] == section and g["pass"] == pass_]
                # Ours in red, the peers in colours that never repeat it (the default cycle's 4th
                # colour is red too, which made quack look like ours).
                others = iter(PEER_COLOURS)
                for name, info in payload["peers"].items():
                    xs = [g[key] for g in points if g["results"][name]["status"] == "ok"]
                    ys = [
                        g["results"][name]["gb_per_s"]
                        for g in points
                        if g["results"][name]["status"] == "ok"
                    ]
                    if not xs:
                        continue
                    mine = name == payload["ours"]
                    ax.plot(
                        xs,
                        ys,
                        marker="o",
                        ms=3,
                        lw=2.4 if mine else 1.2,
                        color="tab:red" if mine else next(others),
                        label=info["label"],
                    )
                if copy:
                    ax.axhline(copy, color="k", ls="--", lw=1, label=f"copy {copy:.0f} GB/s")
                fixed = (
                    (
                        f"M*N = {points[0]['m'] * points[0]['n']:,}"
                        if key == "n"
                        else f"N = {points[0]['n']}"
                    )
                    if points
                    else ""
                )
                dtype = points[0]["dtype"] if points else ""
                ax.set_title(f"{PASS_SHORT[pass_]}, {dtype}, {fixed}", fontsize=9)
                ax.set_xscale("log", base=2)
                ax.set_xlabel(label)
                ax.set_ylabel("GB/s")
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
        env = payload["environment"]
        fig.suptitle(
            f"bench {mode}: {env['device']}, torch {env['torch']}, triton {env['triton']}",
            fontsize=10,
        )
        fig.tight_layout()
        path = Path(out_dir) / f"bench_curves_{mode}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        made.append(path)
    return made

"""`plot`: PNG figures from the JSON the checks and the benchmark wrote.

- ``check-errors.png``: per campaign, each case's max abs error against the float64 oracle (log
  scale, one colour per dtype) with PyTorch's same-dtype reference error as hollow markers.
- ``check-tolerance.png``: each case's worst element as a fraction of its tolerance
  (``|err| / (atol + rtol |oracle|)``; above 1 fails).
- ``bench_curves_<mode>.png``: ``bench``'s bandwidth curves against N and against M.
"""

from __future__ import annotations

import json
from pathlib import Path

from rmsnorm_kernel.cli.campaigns.evaluate import QUANTITY_OF
from rmsnorm_kernel.cli.validate import ConfigError

CAMPAIGNS = tuple(QUANTITY_OF)  # check-forward, check-backward, check-weight
COLOURS = {
    "float32": "tab:blue",
    "float16": "tab:orange",
    "bfloat16": "tab:green",
    "float64": "tab:purple",
}


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


#: What the figures read of each JSON (a file without them is not the command's report).
CHECK_KEYS = ("command", "quantity", "cases", "environment")
BENCH_KEYS = ("groups", "copy_ceiling")


def read_report(path: Path, key: str, needs: tuple[str, ...]) -> dict:
    """The JSON report at ``path`` (found through config key ``key``), holding ``needs``.

    Raises :class:`ConfigError` naming the key and the file when it is not such a report (cut
    short by an interrupted command, or another tool's file), before any figure is written.
    """
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        reason = " ".join(str(e).split())
        raise ConfigError(f"{key}: {path} must be a readable JSON report ({reason})") from e
    missing = [k for k in needs if not isinstance(payload, dict) or k not in payload]
    if missing:
        raise ConfigError(f"{key}: {path} must be the command's JSON report (no {missing})")
    return payload


def read_checks(check_dir: Path) -> list[dict]:
    """The campaigns' JSON reports under ``check_dir`` (``campaign.out_dir``), those present."""
    paths = [check_dir / f"{c}.json" for c in CAMPAIGNS]
    return [read_report(p, "campaign.out_dir", CHECK_KEYS) for p in paths if p.is_file()]


def plot_checks(payloads: list[dict], fig_dir: Path) -> list[Path]:
    """The two check figures of the campaigns' reports (:func:`read_checks`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not payloads:
        return []
    out = []
    for kind in ("errors", "tolerance"):
        fig, axes = plt.subplots(len(payloads), 1, figsize=(12, 3.2 * len(payloads)), squeeze=False)
        for ax, p in zip(axes[:, 0], payloads, strict=True):
            cases = p["cases"]
            for dtype, colour in COLOURS.items():
                idx = [
                    i
                    for i, c in enumerate(cases)
                    if c.get("dtype_checked") == dtype and _num(c.get("max_abs_err")) is not None
                ]
                if not idx:
                    continue
                if kind == "errors":
                    ax.scatter(
                        idx,
                        [max(_num(cases[i]["max_abs_err"]), 1e-18) for i in idx],
                        s=14,
                        color=colour,
                        label=f"kernel {dtype}",
                    )
                    ax.scatter(
                        idx,
                        [max(_num(cases[i]["torch_max_abs_err"]) or 1e-18, 1e-18) for i in idx],
                        s=24,
                        facecolors="none",
                        edgecolors=colour,
                        label=f"torch {dtype}",
                    )
                else:
                    ax.scatter(
                        idx,
                        [max(_num(cases[i]["worst_tol_fraction"]), 1e-9) for i in idx],
                        s=14,
                        color=colour,
                        label=dtype,
                    )
            if kind == "tolerance":
                ax.axhline(1.0, color="red", lw=1, ls="--", label="tolerance")
            ax.set_yscale("log")
            ax.set_ylabel("max |err|" if kind == "errors" else "|err| / tolerance")
            env = p["environment"]
            ax.set_title(
                f"{p['command']} ({p['quantity']}), {len(cases)} cases, "
                f"{env['device']} / {env['backend']}",
                fontsize=10,
            )
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            ax.grid(alpha=0.3)
        axes[-1, 0].set_xlabel("case index (see the JSON's `cases` for names)")
        fig.tight_layout()
        path = fig_dir / f"check-{kind}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        out.append(path)
    return out


def plot_benchmark(payload: dict | None, fig_dir: Path) -> list[Path]:
    """The bandwidth curves of a ``bench`` run (the figures ``bench`` writes beside its JSON)."""
    if payload is None:
        return []
    from rmsnorm_kernel.cli.bench.figures import plot_curves

    return plot_curves(payload, fig_dir)


def run_plots(check_dir: Path, bench_json: Path, fig_dir: Path, console=None) -> int:
    """The figures of the reports under ``check_dir`` and at ``bench_json`` into ``fig_dir``.
    Every report is read first: one that is not a report stops the command (ConfigError) before
    ``fig_dir`` is made."""
    from rich.console import Console

    console = console or Console()
    checks = read_checks(check_dir)
    bench_payload = (
        read_report(bench_json, "benchmark.out_dir", BENCH_KEYS) if bench_json.is_file() else None
    )
    fig_dir.mkdir(parents=True, exist_ok=True)
    made = plot_checks(checks, fig_dir)
    if not made:
        console.print(f"no campaign JSON under {check_dir}: run `make checks` first")
    bench = plot_benchmark(bench_payload, fig_dir)
    if not bench:
        console.print(f"no benchmark JSON at {bench_json}: run `make bench` on a GPU first")
    for path in made + bench:
        console.print(f"wrote {path}")
    return 0 if made or bench else 1

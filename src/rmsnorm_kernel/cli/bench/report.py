"""``bench`` output: rich tables on the terminal; the JSON payload is written by the command."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.table import Table

MODE_TITLE = {
    "graph": "graph mode (CUDA-graph replay: GPU time of the kernels only)",
    "graph_cold": "graph mode, cold inputs (CUDA-graph replay cycling over input copies beyond L2)",
    "end_to_end": "end to end (triton.testing.do_bench median, L2 flushed, host cost included)",
    "tutorial": "the tutorial's protocol (CUDA events around whole calls, median sample)",
}
SECTION_TITLE = {
    "table": "",
    "curve_n": "bandwidth against N at fixed M*N: ",
    "curve_m": "bandwidth against M at fixed N: ",
}
PASS_SHORT = {"forward": "fwd", "forward_backward": "fwd+bwd"}


def _shape(g: dict) -> str:
    return f"{g['m']}x{g['n']} {g['dtype']}"


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _status(r: dict) -> str:
    s = r["status"]
    return "not installed" if s.startswith("not installed") else "fails" if s != "ok" else ""


def timing_table(groups: list[dict], impls: Iterable[str], ours: str, title: str) -> Table:
    """One row per (shape, pass): each implementation's us and GB/s, the best peer, ours' ratio
    to it and ours' share of the copy ceiling."""
    impls = list(impls)
    table = Table(title=title, title_justify="left")
    for col in ("shape", "pass", *[f"{i} us (GB/s)" for i in impls]):
        table.add_column(col, justify="left" if col in ("shape", "pass") else "right")
    for col in ("best peer", f"{ours} vs best", f"{ours} % copy"):
        table.add_column(col, justify="right")
    for g in groups:
        cells = []
        for name in impls:
            r = g["results"][name]
            cells.append(
                f"{r['us']:.1f} ({r['gb_per_s']:.0f})" if r["status"] == "ok" else _status(r)
            )
        mine = g["results"].get(ours, {})
        pct = mine.get("pct_of_copy")
        table.add_row(
            _shape(g),
            PASS_SHORT[g["pass"]],
            *cells,
            g["best_peer"] or "-",
            _ratio(g["ours_vs_best_peer"]),
            "-" if pct is None else f"{pct:.0f}%",
        )
    return table


def value_table(
    groups: list[dict], impls: Iterable[str], key: str, fmt, title: str, ratio: bool = True
) -> Table:
    impls = list(impls)
    table = Table(title=title, title_justify="left")
    for col in ("shape", "pass", *impls):
        table.add_column(col, justify="left" if col in ("shape", "pass") else "right")
    if ratio:
        table.add_column("ours vs best", justify="right")
    for g in groups:
        cells = [
            fmt(g["results"][n][key])
            if g["results"][n]["status"] == "ok"
            else _status(g["results"][n])
            for n in impls
        ]
        extra = [_ratio(g.get("ours_vs_best_peer"))] if ratio else []
        table.add_row(_shape(g), PASS_SHORT[g["pass"]], *cells, *extra)
    return table


def print_report(payload: dict, console: Console) -> None:
    impls = list(payload["peers"])
    ours = payload["ours"]
    groups = payload["groups"]
    env = payload["environment"]
    console.print(f"bench on {env['device']} (torch {env['torch']}, triton {env['triton']})")
    for mode, c in payload["copy_ceiling"].items():
        figure = f"{c['gb_per_s']:.0f} GB/s" if c["status"] == "ok" else c["status"]
        console.print(f"copy ceiling, {mode}: {figure} ({c['bytes'] / 2**30:.1f} GiB moved)")
    host = [g for g in groups if g["section"] == "host"]
    if host:
        h = host[0]
        console.print(
            value_table(
                host,
                impls,
                "us",
                lambda v: f"{v:.1f}",
                f"host cost per call, us (median of {h.get('rounds', 1)} interleaved rounds "
                f"of {h['calls']} eager calls at {_shape(h)}, each synchronised only at its end)",
            )
        )
    for section in ("table", "curve_n", "curve_m"):
        for mode in MODE_TITLE:
            sel = [g for g in groups if g["section"] == section and g["mode"] == mode]
            if sel:
                console.print(
                    timing_table(sel, impls, ours, SECTION_TITLE[section] + MODE_TITLE[mode])
                )
    value_tables = (  # (mode, key, format, title, with ratios)
        (
            "memory",
            "peak_bytes",
            lambda v: f"{v / 2**20:.1f}",
            "peak memory of one call, MiB (max_memory_allocated delta)",
            True,
        ),
        ("error", "max_abs_err", lambda v: f"{v:.2e}", "forward max |y - float64 oracle|", False),
    )
    for mode, key, form, title, ratio in value_tables:
        sel = [g for g in groups if g["mode"] == mode]
        if sel:
            console.print(value_table(sel, impls, key, form, title, ratio=ratio))
    for name, info in payload["peers"].items():
        version = f" {info['version']}" if info["version"] else ""
        console.print(
            f"  {name}: {info['label']}{version} - {info['notes']}"
            + ("" if info["status"] == "ok" else f" ({info['status']})"),
            markup=False,
        )
    for note in failure_notes(groups):
        console.print(f"  {note}", highlight=False, markup=False)


def failure_notes(groups: list[dict]) -> list[str]:
    """Each implementation's distinct failure reasons, with the first cell that showed it."""
    seen: dict[tuple[str, str], str] = {}
    for g in groups:
        for name, r in g["results"].items():
            if r["status"].startswith("fails"):
                where = f"{_shape(g)} {PASS_SHORT[g['pass']]} {g['mode']}"
                seen.setdefault((name, r["status"]), where)
    return [f"{name} {status} (first at {where})" for (name, status), where in seen.items()]

"""Campaign reports: JSON on disk, a rich table on the terminal, the run's environment."""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table


def environment() -> dict:
    """Versions and hardware a figure depends on (the 'hardware named' of our figures)."""
    import triton

    from rmsnorm_kernel.backend import BACKEND

    info = {
        "backend": BACKEND,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "cuda_available": torch.cuda.is_available(),
        "device": "cpu (Triton interpreter)",
    }
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def _clean(value):
    """JSON has no inf/nan: write them as strings so the file stays standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(payload: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(payload), indent=2) + "\n")
    return path


def fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return format(value, spec)


def summary_table(payload: dict) -> Table:
    """Max abs error per dtype for the campaign's quantity, with the worst kernel/torch ratio."""
    q = payload["quantity"]
    env = payload["environment"]
    table = Table(
        title=f"{payload['command']}: max |{q} - oracle(float64)| per dtype "
        f"({env['device']}, {env['backend']})"
    )
    for col in (
        "dtype",
        "cases",
        "pass",
        "fail",
        "skipped",
        "atol",
        "rtol",
        "max abs err",
        "worst case",
        "max ratio vs torch",
        "status",
    ):
        left = col in ("dtype", "worst case", "status")
        table.add_column(col, justify="left" if left else "right")
    for dtype, s in payload["summary"].items():
        ok = s["failed"] == 0
        table.add_row(
            dtype,
            str(s["cases"]),
            str(s["passed"]),
            str(s["failed"]),
            str(s["skipped"]),
            fmt(s["atol"]),
            fmt(s["rtol"]),
            fmt(s["max_abs_err"]),
            s["worst_case"] or "-",
            fmt(s["max_ratio"], ".2f"),
            "[green]ok[/green]" if ok else "[red]FAIL[/red]",
        )
    return table


def print_report(payload: dict, console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(payload))
    failed = [c for c in payload["cases"] if c["status"] in ("fail", "error")]
    for c in failed[:20]:
        console.print(f"[red]FAIL[/red] {c['name']}: {c['message']}")
    if len(failed) > 20:
        console.print(f"... and {len(failed) - 20} more failing cases (see {payload['json']})")
    verdict = "[green]PASS[/green]" if payload["passed"] else "[red]FAIL[/red]"
    console.print(
        f"{verdict} {payload['command']}: {payload['counts']['passed']} passed, "
        f"{payload['counts']['failed']} failed, {payload['counts']['skipped']} skipped "
        f"of {payload['counts']['cases']} cases -> {payload['json']}"
    )

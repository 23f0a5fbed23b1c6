"""Campaign reports: the rich tables of a check campaign (JSON and environment: cli/common.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rmsnorm_kernel.cli.common import fmt


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

"""The check campaigns: ``check-forward`` (y), ``check-backward`` (dx), ``check-weight`` (dweight).

Each runs its configured cases (72 in the tutorial grid) through :func:`evaluate_case`, prints a
table of the maximum absolute error per dtype, writes every case to JSON, and fails if any element
of any case is outside the tolerances fixed in the config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from rich.console import Console

from rmsnorm_kernel.cli.campaigns.cases import Case, build_cases
from rmsnorm_kernel.cli.campaigns.evaluate import QUANTITY_OF, CaseResult, Impl, evaluate_case
from rmsnorm_kernel.cli.campaigns.report import print_report
from rmsnorm_kernel.cli.common import (
    environment,
    fmt,
    read_ratio_limits,
    read_tolerances,
    write_json,
)


def case_row(res: CaseResult, quantity: str) -> dict:
    row = {
        **res.case.as_dict(),
        "status": res.status,
        "message": res.message,
        "seconds": round(res.seconds, 4),
        "h_max_abs_err": res.h_max_abs_err,
    }
    qr = res.quantities.get(quantity)
    if qr is not None:
        row.update(
            {
                "dtype_checked": qr.dtype,
                "atol": qr.atol,
                "rtol": qr.rtol,
                "max_abs_err": qr.max_abs_err,
                "torch_max_abs_err": qr.torch_max_abs_err,
                "ratio": qr.ratio,
                "ratio_limit": qr.ratio_limit,
                "worst_tol_fraction": qr.worst_tol_fraction,
                "failing_elements": qr.failing_elements,
                "elements": qr.elements,
            }
        )
    return row


def summarise(rows: Sequence[dict], tolerances: Mapping) -> dict:
    summary: dict[str, dict] = {}
    for row in rows:
        dtype = row.get("dtype_checked", row["dtype"])
        s = summary.setdefault(
            dtype,
            {
                "cases": 0,
                "passed": 0,
                "failed": 0,
                "skipped": 0,
                "atol": tolerances[dtype]["atol"],
                "rtol": tolerances[dtype]["rtol"],
                "max_abs_err": None,
                "worst_case": None,
                "max_ratio": None,
            },
        )
        s["cases"] += 1
        if row["status"] == "skipped":
            s["skipped"] += 1
            continue
        s["passed" if row["status"] == "pass" else "failed"] += 1
        err = row.get("max_abs_err")
        if err is not None and (s["max_abs_err"] is None or err > s["max_abs_err"]):
            s["max_abs_err"], s["worst_case"] = err, row["name"]
        ratio = row.get("ratio")
        if ratio is not None and (s["max_ratio"] is None or ratio > s["max_ratio"]):
            s["max_ratio"] = ratio
    return summary


def select_cases(ccfg: Mapping, grids: Sequence[str] | None = None) -> list[Case]:
    return build_cases(ccfg["catalogue"], grids if grids is not None else ccfg["grids"])


def run_campaign(
    command: str,
    ccfg: Mapping,
    *,
    impl: Impl | None = None,
    device: torch.device | None = None,
    out_dir: Path | None = None,
    console: Console | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Run one campaign from its config (``cfg.campaign``); returns the JSON payload."""
    from rmsnorm_kernel.backend import BACKEND, kernel_device

    if impl is None:
        from rmsnorm_kernel import rmsnorm as impl
    device = device or kernel_device()
    console = console or Console()
    quantity = QUANTITY_OF[command]
    tolerances = read_tolerances(ccfg["tolerances"])  # checked before any output exists
    ratio_limits = read_ratio_limits(ccfg.get("ratio_limit"))
    gate_backends = list(ccfg.get("ratio_gate_backends") or [BACKEND])
    ratio_gated = BACKEND in gate_backends
    if not ratio_gated:
        ratio_limits = {}
    cases = select_cases(ccfg)
    rows = []
    for i, case in enumerate(cases, 1):
        if case.requires == "cuda" and BACKEND != "cuda":
            res = CaseResult(
                case=case,
                status="skipped",
                message="needs a CUDA GPU (too slow for the interpreter)",
            )
        else:
            res = evaluate_case(
                case,
                impl,
                [quantity],
                eps=float(ccfg["eps"]),
                seed=int(ccfg["seed"]),
                device=device,
                tolerances=tolerances,
                ratio_limits=ratio_limits,
            )
        row = case_row(res, quantity)
        rows.append(row)
        line = (
            f"[{i:3d}/{len(cases)}] {case.name:<42} max|err| {fmt(row.get('max_abs_err')):>9}"
            f"  ratio {fmt(row.get('ratio'), '.2f'):>5}  {res.status}"
        )
        (progress or (lambda s: print(s, flush=True)))(line)
    counts = {
        "cases": len(rows),
        "passed": sum(r["status"] == "pass" for r in rows),
        "failed": sum(r["status"] in ("fail", "error") for r in rows),
        "skipped": sum(r["status"] == "skipped" for r in rows),
    }
    out_dir = Path(out_dir or ccfg["out_dir"])
    path = out_dir / f"{command}.json"
    payload = {
        "command": command,
        "quantity": quantity,
        "implementation": getattr(impl, "__name__", repr(impl)),
        "environment": environment(),
        "eps": float(ccfg["eps"]),
        "seed": int(ccfg["seed"]),
        "grids": list(ccfg["grids"]),
        "tolerances": tolerances,
        "ratio_limit": ratio_limits,
        "ratio_gated": ratio_gated,
        "counts": counts,
        "passed": counts["failed"] == 0 and counts["passed"] > 0,
        "max_abs_err": max(
            (r["max_abs_err"] for r in rows if r.get("max_abs_err") is not None), default=None
        ),
        "summary": summarise(rows, tolerances),
        "cases": rows,
        "json": str(path),
    }
    write_json(payload, path)
    print_report(payload, console)
    if not ratio_gated and ccfg.get("ratio_limit"):
        console.print(
            f"note: the kernel/torch ratio is reported, not gated, on the {BACKEND} "
            f"backend (gated on {gate_backends}; see campaign.ratio_gate_backends)"
        )
    return payload

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
from rmsnorm_kernel.cli.validate import ConfigError, eps, names, writable_dir


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


def check_grids(catalogue: Mapping, grids, key: str) -> list[Case]:
    """The cases of ``grids`` (``key``: a non-empty list of catalogue grids that holds at least
    one case); :class:`ConfigError` naming ``key`` otherwise, before anything runs."""
    grids = names(grids, key, "grid")
    cases = build_cases(catalogue, grids)
    if not cases:
        raise ConfigError(f"{key} must select at least one case (grids {grids} hold none)")
    return cases


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
    """Run one campaign from its config (``cfg.campaign``); returns the JSON payload.

    Every key is checked before any case runs (:class:`ConfigError` naming the key): tolerances,
    ``eps`` (the kernels' rule), ``grids`` (at least one case) and ``out_dir`` (a writable
    directory; ``out_dir``, when given, in its place)."""
    from rmsnorm_kernel.backend import BACKEND, kernel_device

    if impl is None:
        from rmsnorm_kernel import rmsnorm as impl
    device = device or kernel_device()
    console = console or Console()
    quantity = QUANTITY_OF[command]
    tolerances = read_tolerances(ccfg["tolerances"])  # checked before any output exists
    eps_value = eps(ccfg["eps"], "campaign.eps")
    ratio_limits = read_ratio_limits(ccfg.get("ratio_limit"))
    gate_backends = list(ccfg.get("ratio_gate_backends") or [BACKEND])
    ratio_gated = BACKEND in gate_backends
    if not ratio_gated:
        ratio_limits = {}
    cases = check_grids(ccfg["catalogue"], ccfg["grids"], "campaign.grids")
    # an empty campaign.out_dir= would write into the current directory
    out_dir = writable_dir(ccfg["out_dir"] if out_dir is None else out_dir, "campaign.out_dir")
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
                eps=eps_value,
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
    path = out_dir / f"{command}.json"
    payload = {
        "command": command,
        "quantity": quantity,
        "implementation": getattr(impl, "__name__", repr(impl)),
        "environment": environment(),
        "eps": eps_value,
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

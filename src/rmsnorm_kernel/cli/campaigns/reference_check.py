"""`reference`: prove the oracle before anything is compared with it.

1. ``torch.autograd.gradcheck`` in float64 on :func:`rmsnorm_reference` (finite differences
   against autograd's analytic Jacobian).
2. The tutorial's :func:`manual_backward` (explicit formulas) against autograd on the reference.

(The tutorial's synthetic splits are the ``data`` command's: cli/data.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from rmsnorm_kernel.cli.common import DTYPES, Tolerances, read_tolerances
from rmsnorm_kernel.cli.validate import eps as check_eps
from rmsnorm_kernel.reference import manual_backward, rmsnorm_reference

GRADCHECK_SHAPES = [(5, 16), (3, 257)]  # a power of two and the tutorial's odd width
MANUAL_SHAPES = [(1, 256), (17, 257)]
# manual_backward vs autograd: identical math, different operation order, so the campaign
# tolerances of the dtype apply.
MANUAL_DTYPES = ("float64", "float32")
# gradcheck compares float64 autograd with central differences of step 1e-6, whose own error is
# ~1e-10 relative on this smooth function: 1e-7 / 1e-5 is tight yet clear of that noise.
GRADCHECK_TOL = {"atol": 1e-7, "rtol": 1e-5}


def check_oracle(tolerances: Tolerances, eps: float = 1e-6, seed: int = 0) -> list[dict]:
    """Rows of (check, shape, dtype, max abs diff, passed); ``tolerances`` from the campaign."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for m, n in GRADCHECK_SHAPES:
        x = torch.randn(m, n, generator=g, dtype=torch.float64).requires_grad_()
        w = (1 + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)).requires_grad_()
        ok = torch.autograd.gradcheck(
            lambda a, b: rmsnorm_reference(a, b, eps),
            (x, w),
            eps=1e-6,
            **GRADCHECK_TOL,
            raise_exception=False,
        )
        rows.append(
            {
                "check": "gradcheck(rmsnorm_reference)",
                "shape": [m, n],
                "dtype": "float64",
                "max_abs_diff": None,
                "passed": bool(ok),
            }
        )
    for name in MANUAL_DTYPES:
        dtype, atol, rtol = DTYPES[name], tolerances[name]["atol"], tolerances[name]["rtol"]
        for m, n in MANUAL_SHAPES:
            x = torch.randn(m, n, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
            w = (1 + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
            w.requires_grad_()
            dy = torch.randn(m, n, generator=g, dtype=torch.float64).to(dtype)
            dx_a, dw_a = torch.autograd.grad(rmsnorm_reference(x, w, eps), (x, w), dy)
            dx_m, dw_m = manual_backward(x.detach(), w.detach(), dy, eps)
            for grad, a, b in (("dx", dx_a, dx_m), ("dweight", dw_a, dw_m)):
                diff = float((a - b).abs().max())
                rows.append(
                    {
                        "check": f"manual_backward {grad} vs autograd",
                        "shape": [m, n],
                        "dtype": name,
                        "max_abs_diff": diff,
                        "passed": bool(torch.allclose(a, b, atol=atol, rtol=rtol)),
                    }
                )
    return rows


def run_reference(cfg, out_dir: Path, console: Console | None = None) -> int:
    console = console or Console()
    eps = check_eps(cfg.campaign.eps, "campaign.eps")  # the campaigns' eps: the kernels' rule
    rows = check_oracle(read_tolerances(cfg.campaign.tolerances), eps)
    table = Table(title="reference: the float64 oracle")
    for col in ("check", "shape", "dtype", "max abs diff", "result"):
        table.add_column(col)
    for r in rows:
        diff = "-" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.3g}"
        table.add_row(
            r["check"],
            "x".join(map(str, r["shape"])),
            r["dtype"],
            diff,
            "[green]ok[/green]" if r["passed"] else "[red]FAIL[/red]",
        )
    console.print(table)
    ok = all(r["passed"] for r in rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "oracle.json"
    path.write_text(json.dumps({"eps": eps, "checks": rows}, indent=2) + "\n")
    console.print(
        f"{'[green]PASS[/green]' if ok else '[red]FAIL[/red]'} reference: "
        f"{sum(r['passed'] for r in rows)}/{len(rows)} oracle checks -> {path}"
    )
    return 0 if ok else 1

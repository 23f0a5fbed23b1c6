"""`reference`: prove the oracle before anything is compared with it, and write the data splits.

1. ``torch.autograd.gradcheck`` in float64 on :func:`rmsnorm_reference` (finite differences
   against autograd's analytic Jacobian).
2. The tutorial's :func:`manual_backward` (explicit formulas) against autograd on the reference.
3. The synthetic train/val/test splits as safetensors + ``manifest.json`` (sizes, seed, sha256),
   generated twice and required to be bitwise equal (the task is deterministic in its config).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from rmsnorm_kernel.cli.campaigns.cases import DTYPES
from rmsnorm_kernel.cli.campaigns.tolerances import Tolerances, read_tolerances
from rmsnorm_kernel.reference import manual_backward, rmsnorm_reference

GRADCHECK_SHAPES = [(5, 16), (3, 257)]  # a power of two and the tutorial's odd width
SPLIT_KEYS = (
    "in_features",
    "out_features",
    "teacher_hidden",
    "noise",
    "n_train",
    "n_val",
    "n_test",
    "seed",
)
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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_splits(dataset_cfg: Mapping, out_dir: Path) -> dict:
    """Write train/val/test as safetensors with a manifest; returns the manifest."""
    from safetensors.torch import save_file

    from rmsnorm_kernel.experiment.data import make_splits

    splits = make_splits(dataset_cfg)
    again = make_splits(dataset_cfg)
    deterministic = all(torch.equal(splits[k][i], again[k][i]) for k in splits for i in (0, 1))
    out_dir.mkdir(parents=True, exist_ok=True)
    # Only what make_splits reads: other dataset keys (batch order, batch sizes) name training
    # knobs that do not change the splits and need training's root config to resolve.
    cfg = {key: dataset_cfg[key] for key in SPLIT_KEYS}
    manifest = {
        "seed": int(dataset_cfg["seed"]),
        "dataset": cfg,
        "deterministic": deterministic,
        "splits": {},
    }
    for name, (inputs, targets) in splits.items():
        path = out_dir / f"{name}.safetensors"
        save_file(
            {"inputs": inputs.contiguous(), "targets": targets.contiguous()},
            str(path),
            metadata={"split": name, "seed": str(manifest["seed"])},
        )
        manifest["splits"][name] = {
            "file": path.name,
            "rows": int(inputs.shape[0]),
            "inputs": {"shape": list(inputs.shape), "dtype": str(inputs.dtype)},
            "targets": {"shape": list(targets.shape), "dtype": str(targets.dtype)},
            "bytes": path.stat().st_size,
            "sha256": _sha256(path),
        }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def run_reference(cfg, out_dir: Path, console: Console | None = None) -> int:
    console = console or Console()
    eps = float(cfg.campaign.eps)
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
    manifest = write_splits(cfg.dataset, out_dir)
    splits = Table(title=f"synthetic splits -> {out_dir} (data seed {manifest['seed']})")
    for col in ("split", "inputs", "targets", "sha256"):
        splits.add_column(col)
    for name, s in manifest["splits"].items():
        splits.add_row(
            name, str(s["inputs"]["shape"]), str(s["targets"]["shape"]), s["sha256"][:16] + "..."
        )
    console.print(splits)
    ok = all(r["passed"] for r in rows) and manifest["deterministic"]
    (out_dir / "oracle.json").write_text(json.dumps({"eps": eps, "checks": rows}, indent=2) + "\n")
    if not manifest["deterministic"]:
        console.print("[red]FAIL[/red] make_splits is not deterministic in its config")
    console.print(
        f"{'[green]PASS[/green]' if ok else '[red]FAIL[/red]'} reference: "
        f"{sum(r['passed'] for r in rows)}/{len(rows)} oracle checks, manifest "
        f"{out_dir / 'manifest.json'}"
    )
    return 0 if ok else 1

"""Our Liger fused-add and modulated drop-ins beside Liger-Kernel's own kernels, on a GPU.

    PYTHONPATH=src:<liger site> python3 experiments/peer_parity/liger_fused_parity.py \
        --out fused_parity.json

The companion of ``liger_parity.py`` (the plain norm) for ``LigerFusedAddRMSNormFunction``
(``(Y, S)``, S = X + R) and ``LigerModulatedRMSNormFunction`` (``(1 + scale) * norm + shift``,
scale and shift of one row, one per batch, or one per row), both called through ``apply`` with
the same arguments on both sides. Per case: the share of each output's elements bitwise equal
to Liger's and the largest difference in ulps of the output's dtype; per input, each side's
largest relative gradient error against a float64 oracle of the exact formula (S rounded to X's
dtype, as both store it; nothing else rounded). ``--device cpu`` runs both through Triton's
interpreter (a check of this script; the interpreter's bfloat16 arithmetic differs from the
GPU's, so compare 16-bit figures on the GPU only).
"""

from __future__ import annotations

import argparse
import json

import torch
from liger_kernel.ops import LigerFusedAddRMSNormFunction as TheirFused
from liger_kernel.ops import LigerModulatedRMSNormFunction as TheirModulated

from rmsnorm_kernel.integrations.liger import LigerFusedAddRMSNormFunction as OurFused
from rmsnorm_kernel.integrations.liger import LigerModulatedRMSNormFunction as OurModulated

EPS = 1e-6
MODES = (("llama", 0.0), ("gemma", 1.0), ("none", 0.0))
DTYPES = [
    (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16),
    (torch.float32, torch.float32),
    (torch.bfloat16, torch.float32),
]
FUSED_SHAPES = [(8, 257), (4, 37, 4096), (2048, 2048), (512, 128)]
MODULATED_SHAPES = [(3, 5, 257), (4, 37, 4096), (2, 1024, 2048)]


def ulp(y: torch.Tensor) -> torch.Tensor:
    """The spacing of ``y``'s dtype at each |y| (at least the smallest normal's)."""
    info = torch.finfo(y.dtype)
    a = y.float().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(a))) * info.eps


def rel(a, b):
    return ((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def norm64(h, w, offset):
    return h * torch.rsqrt(h.square().mean(-1, keepdim=True) + EPS) * (offset + w)


def run(fn, inputs, grads, args):
    """Outputs (detached) and the inputs' gradients of ``fn(*leaves, *args)`` for the given
    output gradients (each call gets its own copies: Liger's in_place may overwrite them)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    outs = fn(*leaves, *args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, [g.clone() for g in grads])
    return [o.detach() for o in outs], [t.grad for t in leaves]


def record(kind, case, ours, theirs, oracle_outs, oracle_grads, names):
    (yo, go), (yt, gt) = ours, theirs
    row = dict(kind=kind, **case)
    row["equal"] = [(a == b).float().mean().item() for a, b in zip(yo, yt, strict=True)]
    row["max_ulp"] = [
        ((a.float() - b.float()).abs() / ulp(b)).max().item() for a, b in zip(yo, yt, strict=True)
    ]
    row["out_err"] = [[rel(a, r), rel(b, r)] for a, b, r in zip(yo, yt, oracle_outs, strict=True)]
    row["grad_err"] = {
        n: [rel(a, r), rel(b, r)] for n, a, b, r in zip(names, go, gt, oracle_grads, strict=True)
    }
    print(json.dumps(row), flush=True)
    return row


def fused_cases(device):
    for mode, offset in MODES:
        for xdt, wdt in DTYPES:
            for shape in FUSED_SHAPES:
                torch.manual_seed(0)
                x = torch.randn(shape, device=device, dtype=xdt)
                r = torch.randn(shape, device=device, dtype=xdt)
                w = (torch.rand(shape[-1], device=device) + 0.5).to(wdt)
                dy = torch.randn(shape, device=device, dtype=xdt)
                ds = torch.randn(shape, device=device, dtype=xdt)
                args = (EPS, offset, mode, False)
                ours = run(OurFused.apply, (x, r, w), (dy, ds), args)
                theirs = run(TheirFused.apply, (x, r, w), (dy, ds), args)
                s = (x + r).double().requires_grad_(True)  # S as both store it
                wd = w.double().requires_grad_(True)
                y = norm64(s, wd, offset)
                torch.autograd.backward((y, s), (dy.double(), ds.double()))
                case = dict(mode=mode, x=str(xdt), w=str(wdt), shape=list(shape))
                yield record(
                    "fused_add", case, ours, theirs, (y.detach(), s.detach()),
                    (s.grad, s.grad, wd.grad), ("X", "R", "W"),
                )  # fmt: skip


def modulated_cases(device):
    for mode, offset in MODES:
        for xdt, wdt in DTYPES:
            for shape in MODULATED_SHAPES:
                for scale_mode in ("global", "batch", "row"):
                    torch.manual_seed(0)
                    n = shape[-1]
                    rows = {"global": (n,), "batch": (shape[0], n), "row": shape}[scale_mode]
                    x = torch.randn(shape, device=device, dtype=xdt)
                    w = (torch.rand(n, device=device) + 0.5).to(wdt)
                    scale = (torch.randn(rows, device=device) * 0.1).to(xdt)
                    shift = (torch.randn(rows, device=device) * 0.1).to(xdt)
                    dy = torch.randn(shape, device=device, dtype=xdt)
                    args = (EPS, offset, mode, False)
                    inputs = (x, w, scale, shift)
                    ours = run(OurModulated.apply, inputs, (dy,), args)
                    theirs = run(TheirModulated.apply, inputs, (dy,), args)
                    xd, wd, sd, hd = (t.double().requires_grad_(True) for t in inputs)
                    k = scale.numel() // n
                    y = norm64(xd, wd, offset).reshape(k, -1, n)
                    y = y * (1 + sd.reshape(k, 1, n)) + hd.reshape(k, 1, n)
                    y = y.reshape(shape)
                    y.backward(dy.double())
                    case = dict(
                        mode=mode, x=str(xdt), w=str(wdt), shape=list(shape), scale=scale_mode
                    )
                    yield record(
                        "modulated", case, ours, theirs, (y.detach(),),
                        (xd.grad, wd.grad, sd.grad, hd.grad), ("X", "W", "scale", "shift"),
                    )  # fmt: skip


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtypes", default="all", help="'float32': the float32 cases only")
    args = p.parse_args()
    if args.dtypes == "float32":
        DTYPES[:] = [(torch.float32, torch.float32)]
    if args.device == "cpu":  # the interpreter: small shapes prove the script, not the kernels
        FUSED_SHAPES[:] = [(8, 257), (3, 5, 64)]
        MODULATED_SHAPES[:] = [(3, 5, 64)]
    rows = [*fused_cases(args.device), *modulated_cases(args.device)]
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    with open(args.out, "w") as f:
        json.dump(dict(device=name, rows=rows), f, indent=1)
    worse = [
        (r["kind"], r["mode"], r["x"], r["w"], r["shape"], k)
        for r in rows
        for k, (ours, theirs) in r["grad_err"].items()
        if r["mode"] != "none" and ours > 2 * theirs + 1e-6
    ]
    print(f"{len(rows)} cases; a gradient error of ours > 2x Liger's in {len(worse)}: {worse[:8]}")
    for kind in ("fused_add", "modulated"):
        sel = [r for r in rows if r["kind"] == kind and r["mode"] != "none"]
        print(
            f"{kind} (llama, gemma): min equal {min(min(r['equal']) for r in sel):.5f}, "
            f"max ulp {max(max(r['max_ulp']) for r in sel):.1f}"
        )


if __name__ == "__main__":
    main()

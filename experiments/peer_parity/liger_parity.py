"""Our Liger drop-in (``rmsnorm_kernel.integrations.liger``) beside Liger-Kernel itself, on a GPU.

    PYTHONPATH=src:<liger site> python3 experiments/peer_parity/liger_parity.py --out parity.json

For every casting mode x offset x (X dtype, W dtype) x shape: the forward of both modules built
alike (same weight values), then dX and dW for the same dY. Recorded per case: the share of
output elements that are bitwise equal, the largest difference in units of X's dtype's spacing
at that value (ulp), and each implementation's largest relative error of dX and dW against a
float64 oracle of the mode's formula (``x * r * (offset + w)``, r = rsqrt(mean(x^2) + eps)).
Liger's ``in_place=True`` overwrites dY, so each backward gets its own copy.
"""

from __future__ import annotations

import argparse
import json

import torch
from liger_kernel.transformers.rms_norm import LigerRMSNorm as TheirRMSNorm

from rmsnorm_kernel.integrations.liger import LigerRMSNorm as OurRMSNorm

EPS = 1e-6
SHAPES = [(8, 257), (4, 37, 4096), (2048, 2048), (512, 128)]
DTYPES = [
    (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16),
    (torch.float32, torch.float32),
    (torch.bfloat16, torch.float32),
]


def ulp(y: torch.Tensor) -> torch.Tensor:
    """The spacing of ``y``'s dtype at each |y| (at least the smallest normal's)."""
    info = torch.finfo(y.dtype)
    a = y.float().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(a))) * info.eps


def oracle(x, w, offset, dy):
    """float64 y, dx, dw of ``x * r * (offset + w)``."""
    xd = x.detach().double().requires_grad_(True)
    wd = w.detach().double().requires_grad_(True)
    r = torch.rsqrt(xd.square().mean(-1, keepdim=True) + EPS)
    y = xd * r * (offset + wd)
    y.backward(dy.double())
    return y.detach(), xd.grad, wd.grad


def run(module_cls, mode, offset, x, w, dy):
    mod = module_cls(x.shape[-1], eps=EPS, offset=offset, casting_mode=mode).cuda()
    with torch.no_grad():
        mod.weight.data = w.detach().clone()
    xi = x.detach().clone().requires_grad_(True)
    y = mod(xi)
    y.backward(dy.clone())
    return y.detach(), xi.grad, mod.weight.grad


def rel(a, b):
    return ((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rows = []
    for mode in ("llama", "gemma", "none"):
        for offset in (0.0, 1.0):
            for xdt, wdt in DTYPES:
                for shape in SHAPES:
                    torch.manual_seed(0)
                    x = torch.randn(shape, device="cuda", dtype=xdt)
                    w = (torch.rand(shape[-1], device="cuda") + 0.5).to(wdt)
                    dy = torch.randn(shape, device="cuda", dtype=xdt)
                    ours = run(OurRMSNorm, mode, offset, x, w, dy)
                    theirs = run(TheirRMSNorm, mode, offset, x, w, dy)
                    ref = oracle(x, w, offset, dy)
                    y_o, y_t = ours[0], theirs[0]
                    r = dict(
                        mode=mode,
                        offset=offset,
                        x=str(xdt),
                        w=str(wdt),
                        shape=list(shape),
                        y_dtype=[str(y_o.dtype), str(y_t.dtype)],
                        y_equal=(y_o == y_t).float().mean().item(),
                        y_max_ulp=((y_o.float() - y_t.float()).abs() / ulp(y_t)).max().item(),
                        y_err=[rel(y_o, ref[0]), rel(y_t, ref[0])],
                        dx_err=[rel(ours[1], ref[1]), rel(theirs[1], ref[1])],
                        dw_err=[rel(ours[2], ref[2]), rel(theirs[2], ref[2])],
                    )
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)

    def worse_than_liger(r, key):
        return r[key][0] > 2 * r[key][1] + 1e-6

    worse = [
        r
        for r in rows
        if r["mode"] != "none" and (worse_than_liger(r, "dx_err") or worse_than_liger(r, "dw_err"))
    ]
    print(f"{len(rows)} cases; ours' gradient error > 2x Liger's in {len(worse)}")
    print("min y_equal (llama, gemma):", min(r["y_equal"] for r in rows if r["mode"] != "none"))
    print("max y_max_ulp (llama, gemma):", max(r["y_max_ulp"] for r in rows if r["mode"] != "none"))


if __name__ == "__main__":
    main()

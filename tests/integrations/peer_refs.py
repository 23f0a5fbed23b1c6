"""Shared by the peer drop-in tests: float64 references of each library's formula, the
campaign's tolerances, and inputs made on the kernels' device."""

from __future__ import annotations

import torch
import yaml

import rmsnorm_kernel as rk
from rmsnorm_kernel.paths import CONFIG_DIR

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = [F32, BF16, F16]
SHAPES = [(4, 64), (2, 3, 37)]  # an odd width, three dims
EPS = 1e-6

#: Where the kernels run (the GPU when compiled, else the CPU through the interpreter): every
#: tensor of these tests is made there, module weights included.
DEVICE = "cuda" if rk.BACKEND == "cuda" else "cpu"


_TABLE = yaml.safe_load((CONFIG_DIR / "campaign" / "default.yaml").read_text())["tolerances"]
TOL = {getattr(torch, name): {"atol": t["atol"], "rtol": t["rtol"]} for name, t in _TABLE.items()}


def loosest(*dtypes):
    return max(dtypes, key=lambda d: torch.finfo(d).eps)


def close(actual, expected, dtype, what):
    torch.testing.assert_close(
        actual.detach().double(),
        expected.detach().double(),
        msg=lambda m: f"{what}: {m}",
        **TOL[dtype],
    )


def st_round(t, dtype):
    """``t`` rounded to ``dtype`` (value), with ``t``'s gradient (straight-through)."""
    return t + (t.detach().to(dtype).double() - t.detach())


def rms(x, eps=EPS):
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def make_x(shape, dtype, scale=1.0):
    z = torch.randn(shape)
    return (scale * (z + 0.25 * torch.sign(z))).to(dtype)  # rows well away from rms 0


def make_w(n, dtype, offset=0.0):
    w = torch.randn(n) * 0.5 + (1.0 if offset == 0.0 else 0.0)
    return w.to(dtype)


def leaf(t):
    return t.detach().clone().requires_grad_()


def f64(t):
    return t.detach().double().requires_grad_()


# ---------------------------------------------------------------------------------------------
# Liger-Kernel


def liger_ref(x, w, offset, mode, x_dtype):
    """Liger's formula in float64: llama rounds ``x * r`` to X's dtype before ``offset + W``."""
    n = x * rms(x)
    if mode == "llama":
        n = st_round(n, x_dtype)
    return n if w is None else n * (offset + w)

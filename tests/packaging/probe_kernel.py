"""Run as a script in a fresh interpreter: the kernel library alone does RMSNorm forward + backward.

``python probe_kernel.py`` imports only ``torch`` and ``rmsnorm_kernel`` (no test helpers, so it
also runs in a venv that holds nothing but the installed wheel and its dependencies), runs the
functional and module forms on a (3, 40) float32 case on the CPU, checks them against a float64
oracle written out here, and prints one JSON line: where the package was loaded from, the kernel
call counts, and every loaded module of the experiment / command layers or their libraries (the
caller asserts that list is empty).
"""

from __future__ import annotations

import json
import sys

import torch

import rmsnorm_kernel as rk

# Top-level modules the kernel layer must never pull in: the experiment stack's libraries and
# the project's own upper layers.
UPPER = (
    "hydra",
    "omegaconf",
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "tensorboard",
    "transformers",
    "rmsnorm_kernel.experiment",
    "rmsnorm_kernel.cli",
    "rmsnorm_kernel.integrations",
    "rmsnorm_kernel.train",
)


def _oracle(x, w, dy, eps):
    """float64 RMSNorm and its gradients: ``(y, dx, dw)``, each float64."""
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64
    y64.backward(dy.double())
    return y64.detach(), x64.grad, w64.grad


def main() -> None:
    torch.manual_seed(0)
    eps = 1e-6
    x = torch.randn(3, 40, requires_grad=True)
    w = torch.randn(40, requires_grad=True)
    dy = torch.randn(3, 40)

    y = rk.rmsnorm(x, w, eps)
    y.backward(dy)
    want_y, want_dx, want_dw = _oracle(x, w, dy, eps)
    # torch.testing's float32 tolerances, against the float64 result rounded to float32.
    torch.testing.assert_close(y, want_y.float())
    torch.testing.assert_close(x.grad, want_dx.float())
    torch.testing.assert_close(w.grad, want_dw.float())

    module = rk.RMSNorm(40, eps=eps)
    with torch.no_grad():
        module.weight.copy_(w)
    x.grad = None
    module(x).backward(dy)
    torch.testing.assert_close(x.grad, want_dx.float())
    torch.testing.assert_close(module.weight.grad, want_dw.float())

    loaded = sorted(
        name for name in sys.modules if any(name == u or name.startswith(u + ".") for u in UPPER)
    )
    print(
        json.dumps(
            {
                "file": rk.__file__,
                "backend": rk.BACKEND,
                "calls": dict(rk.CALLS),
                "upper_modules": loaded,
            }
        )
    )


if __name__ == "__main__":
    main()

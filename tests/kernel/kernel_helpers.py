"""Oracle and tolerance helpers for the kernel tests (float64 autograd through the reference)."""

from __future__ import annotations

import torch

import rmsnorm_kernel as rk

#: Tolerances fixed before measuring (the seed's, plus bf16 and fp64 for the extended contract).
TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
    torch.float16: dict(atol=3e-3, rtol=3e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float64: dict(atol=1e-12, rtol=1e-10),
}


def oracle(x, weight, dy, eps=1e-6, *, offset=0.0, residual=None):
    """float64 autograd through the reference: ``(y, h, dx, dw, dres)`` in float64."""
    xd = x.detach().double().requires_grad_()
    wd = None if weight is None else weight.detach().double().requires_grad_()
    rd = None if residual is None else residual.detach().double().requires_grad_()
    h = xd if rd is None else (xd + rd)
    if rd is not None:
        # the kernel normalises the sum rounded to x.dtype, as the caller receives it
        h_rounded = h.detach().to(x.dtype).double()
        h = h + (h_rounded - h.detach())
    y = rk.rmsnorm_reference(h, wd, eps, offset=offset)
    y.backward(dy.double())
    return (
        y.detach(),
        None if rd is None else h.detach(),
        xd.grad,
        None if wd is None else wd.grad,
        None if rd is None else rd.grad,
    )


def assert_close(actual, expected, dtype, what):
    """Every element within the tolerances of ``dtype`` (no mean excuses one failure)."""
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(
        actual.double().cpu(), expected.double().cpu(), msg=lambda m: f"{what}: {m}", **tol
    )


def check_against_oracle(x, weight, dtype, eps=1e-6, **kwargs):
    """Run ``rmsnorm`` forward + backward on fresh leaves; assert y, dx, dweight vs the oracle.

    ``dtype`` selects the tolerances. Returns ``(x, weight, y)`` (the leaves carry ``.grad``).
    """
    x = x.detach().requires_grad_()
    weight = None if weight is None else weight.detach().requires_grad_()
    y = rk.rmsnorm(x, weight, eps, **kwargs)
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref, _, dx_ref, dw_ref, _ = oracle(x, weight, dy, eps, **kwargs)
    assert y.dtype == x.dtype and x.grad.dtype == x.dtype
    assert_close(y, y_ref, dtype, "y")
    assert_close(x.grad, dx_ref, dtype, "dx")
    if weight is not None:
        assert weight.grad.dtype == weight.dtype
        assert_close(weight.grad, dw_ref, dtype, "dweight")
    return x, weight, y

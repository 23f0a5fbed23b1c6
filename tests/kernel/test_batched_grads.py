"""Batched gradients: the backward run under vmap after a plain forward.

``torch.autograd.grad(..., is_grads_batched=True)`` vmaps the backward over a batch of upstream
gradients (the legacy vmap); ``gradcheck(check_batched_grad=True)`` (PyTorch's OpInfo gradient
tests) and ``torch.autograd.functional.jacobian(vectorize=True)`` go through it. Batched tensors
have no storage for a Triton kernel to read, so that backward runs the exact PyTorch-ops formula
(``double_backward.differentiable_backward``); these tests check it against the Triton backward
one gradient at a time, and against ``F.rms_norm``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_helpers import assert_close
from torch.autograd import gradcheck, gradgradcheck

import rmsnorm_kernel as rk
from rmsnorm_kernel import double_backward

CASES = {
    "weight": dict(),
    "no weight": dict(weight=False),
    "offset and residual": dict(offset=1.0, residual=True),
    "llama": dict(rounding="llama"),
}


def _inputs(device, dtype, m=3, n=8, weight=True, residual=False):
    x = torch.randn(m, n, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(n, device=device, dtype=dtype, requires_grad=True) if weight else None
    r = torch.randn(m, n, device=device, dtype=dtype, requires_grad=True) if residual else None
    return x, w, r


def _fn(case):
    kwargs = {k: v for k, v in CASES[case].items() if k in ("offset", "rounding")}

    def f(x, w, r):
        out = rk.rmsnorm(x, w, 1e-6, residual=r, **kwargs)
        return out if r is None else out[0] * 1.5 + out[1]  # both outputs reach the loss

    return f


@pytest.mark.parametrize("case", list(CASES))
def test_is_grads_batched_equals_one_gradient_at_a_time(case, device):
    """Each batched gradient equals the Triton backward's for that upstream gradient alone."""
    spec = CASES[case]
    x, w, r = _inputs(
        device, torch.float32, weight=spec.get("weight", True), residual=spec.get("residual", False)
    )
    named = [
        (n, t)
        for n, t in zip(("dx", "dweight", "dresidual"), (x, w, r), strict=True)
        if t is not None
    ]
    names, inputs = [n for n, _ in named], [t for _, t in named]
    y = _fn(case)(x, w, r)
    dys = torch.randn(4, *y.shape, device=device)
    before = double_backward.CALLS["differentiable_backward"]
    batched = torch.autograd.grad(y, inputs, dys, is_grads_batched=True, retain_graph=True)
    assert double_backward.CALLS["differentiable_backward"] == before + 1
    rk.reset_calls()
    for i, dy in enumerate(dys):
        single = torch.autograd.grad(y, inputs, dy, retain_graph=True)
        for name, b, s in zip(names, batched, single, strict=True):
            assert_close(b[i], s, torch.float32, f"{case} {name}[{i}]")
    assert rk.CALLS["backward"] == len(dys)  # one at a time: the Triton backward


@pytest.mark.parametrize("case", list(CASES))
def test_gradcheck_with_batched_grad(case, device):
    spec = CASES[case]
    x, w, r = _inputs(
        device, torch.float64, weight=spec.get("weight", True), residual=spec.get("residual", False)
    )
    inputs = tuple(t for t in (x, w, r) if t is not None)
    f = _fn(case)

    def g(*args):
        it = iter(args)
        x = next(it)
        w = next(it) if spec.get("weight", True) else None
        r = next(it) if spec.get("residual", False) else None
        return f(x, w, r)

    assert gradcheck(g, inputs, check_batched_grad=True)
    assert gradgradcheck(g, inputs, check_batched_grad=True)


def test_module_gradcheck_with_batched_grad(device):
    """nn.RMSNorm's ModuleInfo inputs go through gradcheck with batched gradients (3-D shape)."""
    norm = rk.RMSNorm([2, 5], 1e-3, device=device, dtype=torch.float64)
    names = [name for name, _ in norm.named_parameters()]
    x = torch.randn(4, 2, 5, device=device, dtype=torch.float64, requires_grad=True)

    def f(x, *params):
        return torch.func.functional_call(norm, dict(zip(names, params, strict=True)), (x,))

    assert gradcheck(f, (x, *norm.parameters()), check_batched_grad=True)


def test_vectorized_jacobian_matches_torch(device):
    x = torch.randn(3, 8, device=device, dtype=torch.float64)
    w = torch.randn(8, device=device, dtype=torch.float64)
    ours = torch.autograd.functional.jacobian(
        lambda x, w: rk.rmsnorm(x, w, 1e-6), (x, w), vectorize=True
    )
    theirs = torch.autograd.functional.jacobian(
        lambda x, w: F.rms_norm(x, (8,), w, 1e-6), (x, w), vectorize=True
    )
    for a, b in zip(ours, theirs, strict=True):
        assert_close(a, b, torch.float64, "jacobian")

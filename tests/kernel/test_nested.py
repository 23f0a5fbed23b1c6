"""Jagged nested tensors (``torch.nested``, ``layout=torch.jagged``) through ``rmsnorm``, the
``rms_norm`` drop-in and ``RMSNorm`` (``nested.py``): the kernels run on the values, and the
result is a jagged tensor with x's offsets, as ``F.rms_norm`` returns (it used to fail with
``NotImplementedError: rmsnorm_kernel.rmsnorm_fwd.default``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_helpers import TOLERANCES

import rmsnorm_kernel as rk
from rmsnorm_kernel.contract import ContractTypeError, ContractValueError

EPS = 1e-6


def _jagged(device, dtype, inner=(8,), lengths=(2, 3, 1), seed=0):
    """``(nt, leaves)``: a jagged tensor ``(B, j, *inner)`` built from leaves that need grad."""
    gen = torch.Generator().manual_seed(seed)
    leaves = [
        torch.randn(n, *inner, generator=gen).to(device, dtype).requires_grad_() for n in lengths
    ]
    return torch.nested.as_nested_tensor(leaves, layout=torch.jagged), leaves


def _close(actual, expected, dtype):
    torch.testing.assert_close(actual, expected, **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("entry", ["rmsnorm", "rms_norm", "RMSNorm"])
def test_jagged_input_matches_f_rms_norm(device, dtype, entry):
    nt, leaves = _jagged(device, dtype)
    w = (1 + 0.5 * torch.randn(8)).to(device, dtype).requires_grad_()
    if entry == "rmsnorm":
        out = rk.rmsnorm(nt, w, EPS)
    elif entry == "rms_norm":
        out = rk.rms_norm(nt, (8,), w, EPS)
    else:
        module = rk.RMSNorm(8, eps=EPS, device=device, dtype=dtype)
        with torch.no_grad():
            module.weight.copy_(w)
        out = module(nt)
    want = F.rms_norm(nt, (8,), w, EPS)
    assert out.is_nested and out.layout == torch.jagged and out.shape == want.shape
    assert out.dtype == dtype
    assert torch.equal(out.offsets(), nt.offsets())
    _close(out.values(), want.values(), dtype)
    dy = torch.randn_like(want.values())
    got = torch.autograd.grad(out.values(), leaves, dy)
    ref = torch.autograd.grad(want.values(), leaves, dy)
    for g, r in zip(got, ref, strict=True):
        _close(g, r, dtype)
    if entry == "rmsnorm":  # and the weight's gradient
        out = rk.rmsnorm(nt, w, EPS)
        (dw,) = torch.autograd.grad(out.values(), w, dy)
        (dw_ref,) = torch.autograd.grad(F.rms_norm(nt, (8,), w, EPS).values(), w, dy)
        _close(dw, dw_ref, dtype)


def test_jagged_with_more_dims_and_several_normalised_dims(device):
    """``(B, j, 4, 8)``: over the last dim, and (the drop-in) over the last two."""
    nt, _ = _jagged(device, torch.float32, inner=(4, 8))
    for shape in [(8,), (4, 8)]:
        _close(
            rk.rms_norm(nt, shape, None, EPS).values(),
            F.rms_norm(nt, shape, None, EPS).values(),
            torch.float32,
        )


def test_jagged_residual(device):
    """``residual`` of x's offsets: ``(y, h)`` both jagged, h = x + residual, gradients to both
    inputs' components as the dense computation on the values gives them."""
    nt, leaves = _jagged(device, torch.float32)
    res_nt, res_leaves = _jagged(device, torch.float32, seed=1)
    res_nt = torch.nested.nested_tensor_from_jagged(res_nt.values(), nt.offsets())
    w = torch.randn(8, device=device, requires_grad=True)
    y, h = rk.rmsnorm(nt, w, EPS, residual=res_nt)
    assert y.is_nested and h.is_nested and torch.equal(y.offsets(), nt.offsets())
    hv = nt.values() + res_nt.values()
    assert torch.equal(h.values(), hv)
    want = F.rms_norm(hv, (8,), w, EPS)
    _close(y.values(), want, torch.float32)
    dy, dh = torch.randn_like(want), torch.randn_like(want)
    inputs = [*leaves, *res_leaves, w]  # (nt's graph is shared: kept for the second call)
    got = torch.autograd.grad((y.values(), h.values()), inputs, (dy, dh), retain_graph=True)
    ref = torch.autograd.grad((want, hv), inputs, (dy, dh))
    for g, r in zip(got, ref, strict=True):
        _close(g, r, torch.float32)


def test_jagged_refusals(device):
    """The ragged dim as the normalised one (F.rms_norm refuses it too), a dense residual or
    one of other sequences: refused by name, before any launch."""
    ragged_last = torch.nested.nested_tensor(
        [torch.randn(3, device=device), torch.randn(5, device=device)], layout=torch.jagged
    )
    with pytest.raises(ContractValueError, match="ragged dim is its last"):
        rk.rmsnorm(ragged_last, None, EPS)
    nt, _ = _jagged(device, torch.float32, lengths=(2, 1))
    with pytest.raises(ContractTypeError, match="residual must be a jagged nested tensor"):
        rk.rmsnorm(nt, None, EPS, residual=torch.randn(3, 8, device=device))
    other, _ = _jagged(device, torch.float32, lengths=(1, 2))
    with pytest.raises(ContractValueError, match="residual must have x's offsets"):
        rk.rmsnorm(nt, None, EPS, residual=other)
    with pytest.raises(ContractTypeError, match="residual must be a torch.Tensor"):
        rk.rmsnorm(nt, None, EPS, residual=3)

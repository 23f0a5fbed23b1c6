"""A residual of another dtype than x: the float32 residual stream of mixed precision training
beside a float16 / bfloat16 block output, either way round. ``h = x + residual`` is float32, as
the add is (both convert exactly into float32, so the kernels' float32 add is bit for bit the
same); y is what ``rmsnorm(h, ...)`` gives; each input's gradient comes in its own dtype. Other
pairs are refused by name before any launch."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, oracle

import rmsnorm_kernel as rk
from rmsnorm_kernel import ops

#: 16-bit dtypes (the interpreter rounds float32 -> bfloat16 to nearest even, as the GPU does,
#: since backend._bfloat16_to_nearest_in_the_interpreter).
HALF = [torch.float16, torch.bfloat16]


def _leaves(device, shape, x_dtype, r_dtype, w_dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen).to(device, x_dtype).requires_grad_()
    r = torch.randn(*shape, generator=gen).to(device, r_dtype).requires_grad_()
    w = None
    if w_dtype is not None:
        w = (1 + 0.5 * torch.randn(shape[-1], generator=gen)).to(device, w_dtype)
        w.requires_grad_()
    return x, r, w


@pytest.mark.parametrize("half", HALF, ids=str)
@pytest.mark.parametrize("wide", ["residual", "x"])  # which input is the float32 one
@pytest.mark.parametrize("weight", ["none", "float32", "half"])
@pytest.mark.parametrize("use_h", [True, False])
def test_mixed_residual_matches_oracle(half, wide, weight, use_h, device):
    shape = (3, 5, 300)
    x_dtype, r_dtype = (half, torch.float32) if wide == "residual" else (torch.float32, half)
    w_dtype = {"none": None, "float32": torch.float32, "half": half}[weight]
    x, r, w = _leaves(device, shape, x_dtype, r_dtype, w_dtype)
    y, h = rk.rmsnorm(x, w, 1e-6, residual=r)
    assert h.dtype == torch.float32 and y.dtype == torch.float32
    assert torch.equal(h, x.detach() + r.detach()), "h is the add's float32 sum, bit for bit"
    gen = torch.Generator().manual_seed(1)
    dy = torch.randn(*shape, generator=gen).to(device)
    dh = torch.randn(*shape, generator=gen).to(device)
    if use_h:
        torch.autograd.backward([y, h], [dy, dh])
    else:
        y.backward(dy)
    y_ref, _, dx_ref, dw_ref, dr_ref = oracle(
        x, w, dy, residual=r, dh=dh if use_h else None, h_rounded=h
    )
    assert x.grad.dtype == x_dtype and r.grad.dtype == r_dtype
    assert_close(y, y_ref, torch.float32, "y")
    assert_close(x.grad, dx_ref, x_dtype, "dx")
    assert_close(r.grad, dr_ref, r_dtype, "dresidual")
    if w is not None:
        assert w.grad.dtype == w_dtype
        assert_close(w.grad, dw_ref, w_dtype, "dweight")


def test_mixed_residual_llama_rounding_and_default_eps(device):
    """Llama's rounding of the float32 h, and ``eps=None``: float32's machine epsilon (h's dtype,
    as ``torch.nn.RMSNorm(eps=None)`` would take for h), not the 16-bit input's."""
    x, r, w = _leaves(device, (4, 64), torch.float16, torch.float32, torch.float16)
    y, h = rk.rmsnorm(x, w, None, residual=r, rounding="llama")
    expected = rk.rmsnorm(h.detach(), w, torch.finfo(torch.float32).eps, rounding="llama")
    assert y.dtype == torch.float32
    assert torch.equal(y, expected)


def test_mixed_residual_without_grad_is_the_same_function(device):
    """The inference path (no autograd bookkeeping) returns the same bits."""
    x, r, w = _leaves(device, (6, 96), torch.float16, torch.float32, torch.float32)
    y, h = rk.rmsnorm(x, w, 1e-6, residual=r)
    with torch.no_grad():
        y2, h2 = rk.rmsnorm(x, w, 1e-6, residual=r)
    assert torch.equal(y2, y.detach()) and torch.equal(h2, h.detach())


@pytest.mark.parametrize(
    ("x_dtype", "r_dtype"),
    [
        (torch.bfloat16, torch.float16),  # their sum is float32: neither input holds it
        (torch.float16, torch.bfloat16),
        (torch.float32, torch.float64),
        (torch.float64, torch.float16),
    ],
    ids=str,
)
def test_other_residual_dtypes_are_refused_before_any_launch(x_dtype, r_dtype, device, monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("a kernel launcher ran before the contract refused the input")

    monkeypatch.setattr(ops, "launch_forward", boom)
    x = torch.randn(2, 8, device=device, dtype=x_dtype)
    r = torch.randn(2, 8, device=device, dtype=r_dtype)
    with pytest.raises(TypeError, match=r"residual must have x's dtype .* or be float32 beside"):
        rk.rmsnorm(x, None, 1e-6, residual=r)


def test_mixed_residual_under_compile_matches_eager(device):
    """``torch.compile(fullgraph=True)``: the custom op takes the float32 operand as its x too,
    and autograd returns the 16-bit input's gradient in its dtype."""
    torch._dynamo.reset()

    def f(x, r, w):
        y, h = rk.rmsnorm(x, w, 1e-6, residual=r)
        return (y * y).sum() + (h * h).sum()

    compiled = torch.compile(f, fullgraph=True)
    grads = []
    for fn in (f, compiled):
        x, r, w = _leaves(device, (4, 128), torch.float16, torch.float32, torch.float32)
        fn(x, r, w).backward()
        grads.append((x.grad, r.grad, w.grad))
    for (a, b), what in zip(zip(*grads, strict=True), ("dx", "dresidual", "dweight"), strict=True):
        assert a.dtype == b.dtype, what
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, w=what: f"{w}: {m}")
    torch._dynamo.reset()


def _reference(x, r, w):
    """PyTorch ops: ``h = x + r`` (float32), then F.rms_norm's math in float32."""
    h = x + r
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w, h


def test_mixed_residual_double_backward_and_torch_func(device):
    """create_graph=True (the PyTorch-ops backward) and torch.func.jacrev take the mixed pair
    too, against the same math in PyTorch ops."""
    x, r, w = _leaves(device, (3, 16), torch.float16, torch.float32, torch.float32)
    xr, rr, wr = (t.detach().clone().requires_grad_() for t in (x, r, w))
    y, _ = rk.rmsnorm(x, w, 1e-6, residual=r)
    y_ref, _ = _reference(xr, rr, wr)
    (dx,) = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    (dx_ref,) = torch.autograd.grad((y_ref * y_ref).sum(), xr, create_graph=True)
    assert dx.dtype == torch.float16
    (ddw,) = torch.autograd.grad(dx.float().sum(), w)
    (ddw_ref,) = torch.autograd.grad(dx_ref.float().sum(), wr)
    torch.testing.assert_close(ddw, ddw_ref, rtol=1e-4, atol=1e-4)
    jac = torch.func.jacrev(lambda a, b: rk.rmsnorm(a, w.detach(), 1e-6, residual=b)[0], (0, 1))
    jac_ref = torch.func.jacrev(lambda a, b: _reference(a, b, w.detach())[0], (0, 1))
    for got, want in zip(jac(x.detach(), r.detach()), jac_ref(x.detach(), r.detach()), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)

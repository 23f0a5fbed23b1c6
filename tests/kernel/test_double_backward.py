"""Double backward (issue 15, item 10): exact second derivatives for x, weight and residual.

A backward asked to build a graph (``create_graph=True``) runs the PyTorch-ops formula of
``rmsnorm_kernel.double_backward``; every other backward still runs the Triton kernels. On CPU the
forward runs in Triton's interpreter, in float64 for float64 tensors, so ``gradgradcheck`` checks
the second derivatives exactly. Shapes are small: the interpreter is slow.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_helpers import assert_close

import rmsnorm_kernel as rk
from rmsnorm_kernel import double_backward

F64 = torch.float64


def _leaf(*shape, device, dtype=F64):
    return torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)


def _penalty(fn, inputs):
    """A gradient penalty: first-order grads with ``create_graph=True``, then their grads."""
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum(
        (o * torch.linspace(-1.0, 2.0, o.shape[-1], device=o.device)).sin().sum() for o in outs
    )
    firsts = torch.autograd.grad(loss, inputs, create_graph=True)
    penalty = sum(g.square().sum() for g in firsts)
    return torch.autograd.grad(penalty, inputs)


# (shape of x, weight?, offset, residual?): leading dims, N = 1, no weight, offset, residual.
CASES = {
    "weight": ((3, 5), True, 0.0, False),
    "no_weight_leading_dims": ((2, 2, 4), False, 0.0, False),
    "offset": ((2, 6), True, 1.0, False),
    "n1": ((3, 1), True, 0.5, False),
    "residual": ((2, 3), True, 0.0, True),
    "residual_offset_leading_dims": ((2, 1, 2), True, 1.0, True),
    "residual_no_weight": ((2, 2), False, 0.0, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_gradgradcheck_fp64(device, case):
    shape, has_w, offset, has_r = CASES[case]
    n = shape[-1]
    x = _leaf(*shape, device=device)
    w = _leaf(n, device=device) if has_w else None
    r = _leaf(*shape, device=device) if has_r else None
    inputs = tuple(t for t in (x, w, r) if t is not None)

    def fn(*args):
        it = iter(args)
        a = next(it)
        b = next(it) if has_w else None
        c = next(it) if has_r else None
        return rk.rmsnorm(a, b, 1e-6, offset=offset, residual=c)

    double_backward.CALLS["differentiable_backward"] = 0
    assert torch.autograd.gradgradcheck(fn, inputs)
    assert double_backward.CALLS["differentiable_backward"] > 0


@pytest.mark.parametrize("residual", [False, True], ids=["x", "residual"])
def test_gradgradcheck_non_contiguous_x(device, residual):
    """x read through a view (3-D row-strided rows) and through a copy (transposed last dim)."""
    base = _leaf(1, 2, 5, device=device)  # x = base[..., :3]: rows 5 apart, viewed in place
    tbase = _leaf(3, 2, device=device)  # x = tbase.t(): a strided last dim, copied once
    w = _leaf(3, device=device)
    r3 = _leaf(1, 2, 3, device=device) if residual else None

    def viewed(b, c, *res):
        return rk.rmsnorm(b[..., :3], c, 1e-6, residual=res[0] if res else None)

    def copied(b, c):
        return rk.rmsnorm(b.t(), c, 1e-6)

    if residual:  # the returned h is then a view of the kernel's (M, N) output
        assert torch.autograd.gradgradcheck(viewed, (base, w, r3))
        return
    copies = rk.COPIES["x"]
    assert torch.autograd.gradgradcheck(viewed, (base, w))
    assert torch.autograd.gradgradcheck(copied, (tbase, w))
    assert rk.COPIES["x"] > copies, "the transposed x must have taken the copy path"


def test_gradgradcheck_custom_op_path(device):
    """The torch.library op (what torch.compile traces), called eagerly, is exact too."""
    x, r = _leaf(2, 2, device=device), _leaf(2, 2, device=device)
    w = _leaf(2, device=device)

    def fn(a, b, c):
        y, h, _ = torch.ops.rmsnorm_kernel.rmsnorm_fwd(a, c, b, 1e-6, 1.0)
        return y, h

    assert torch.autograd.gradgradcheck(fn, (x, r, w))
    assert torch.autograd.gradgradcheck(
        lambda a, c: torch.ops.rmsnorm_kernel.rmsnorm_fwd(a, c, None, 1e-6, 0.0)[0],
        (_leaf(2, 2, device=device), w),
    )


@pytest.mark.parametrize("has_w", [True, False], ids=["weight", "no_weight"])
def test_gradient_penalty_matches_f_rms_norm_fp32(device, has_w):
    """The reported bug: d(penalty)/dw was None (with allow_unused) where F.rms_norm has values."""
    x = _leaf(3, 2, 16, device=device, dtype=torch.float32)
    w = _leaf(16, device=device, dtype=torch.float32) if has_w else None
    inputs = (x, w) if has_w else (x,)
    ours = _penalty(lambda a, b=None: rk.rmsnorm(a, b, 1e-6), inputs)
    ref = _penalty(lambda a, b=None: F.rms_norm(a, (16,), b, 1e-6), inputs)
    for got, want, name in zip(ours, ref, ("dx", "dweight"), strict=False):
        assert got is not None, name
        assert got.abs().max() > 0, name
        assert_close(got, want, torch.float32, name)


def test_gradient_penalty_with_residual_matches_f_rms_norm_fp32(device):
    x, r = (
        _leaf(4, 8, device=device, dtype=torch.float32),
        _leaf(4, 8, device=device, dtype=torch.float32),
    )
    w = _leaf(8, device=device, dtype=torch.float32)

    def ref(a, b, c):
        h = a + b
        return F.rms_norm(h, (8,), c, 1e-6), h

    ours = _penalty(lambda a, b, c: rk.rmsnorm(a, c, 1e-6, residual=b), (x, r, w))
    want = _penalty(ref, (x, r, w))
    for got, exp, name in zip(ours, want, ("dx", "dresidual", "dweight"), strict=True):
        assert_close(got, exp, torch.float32, name)


def test_weight_grad_of_penalty_is_not_unused(device):
    """Without allow_unused, the weight's second-order gradient exists (no misleading error)."""
    x = _leaf(2, 8, device=device, dtype=torch.float32)
    w = _leaf(8, device=device, dtype=torch.float32)
    (gx,) = torch.autograd.grad(rk.rmsnorm(x, w, 1e-6).square().sum(), x, create_graph=True)
    (gw,) = torch.autograd.grad(gx.square().sum(), w)
    (gw_ref,) = torch.autograd.grad(
        torch.autograd.grad(F.rms_norm(x, (8,), w, 1e-6).square().sum(), x, create_graph=True)[0]
        .square()
        .sum(),
        w,
    )
    assert_close(gw, gw_ref, torch.float32, "dweight of the penalty")


@pytest.mark.parametrize("path", ["function", "custom_op"])
def test_first_order_backward_still_runs_the_kernels(device, path):
    """Only a backward that builds a graph takes the PyTorch-ops formula."""
    x = _leaf(4, 32, device=device, dtype=torch.float32)
    w = _leaf(32, device=device, dtype=torch.float32)
    r = _leaf(4, 32, device=device, dtype=torch.float32)

    def run():
        if path == "function":
            y, h = rk.rmsnorm(x, w, 1e-6, residual=r)
        else:
            y, h, _ = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, r, 1e-6, 0.0)
        return (y * y).sum() + h.sum()

    double_backward.CALLS["differentiable_backward"] = 0
    rk.reset_calls()
    kernel_grads = torch.autograd.grad(run(), (x, w, r))
    assert rk.CALLS["backward"] == 1
    assert double_backward.CALLS["differentiable_backward"] == 0

    rk.reset_calls()
    graph_grads = torch.autograd.grad(run(), (x, w, r), create_graph=True)
    assert rk.CALLS["backward"] == 0, "create_graph=True must not run the Triton backward"
    assert double_backward.CALLS["differentiable_backward"] == 1
    assert all(g.requires_grad for g in graph_grads)
    # Both paths compute the same first derivatives.
    for got, want, name in zip(graph_grads, kernel_grads, ("dx", "dweight", "dres"), strict=True):
        assert_close(got, want, torch.float32, name)


def test_differentiable_backward_matches_kernels_fp64(device):
    """The formula itself against the kernels' first-order backward (float64, mixed weight)."""
    x = torch.randn(3, 7, device=device, dtype=F64)
    w = torch.randn(7, device=device, dtype=torch.float32)
    dy = torch.randn(3, 7, device=device, dtype=F64)
    xk, wk = x.clone().requires_grad_(), w.clone().requires_grad_()
    rk.rmsnorm(xk, wk, 1e-5, offset=0.25).backward(dy)
    dx, dw = double_backward.differentiable_backward(dy, None, x, w, 1e-5, 0.25, F64)
    assert dx.dtype == F64 and dw.dtype == torch.float32
    assert_close(dx, xk.grad, F64, "dx")
    assert_close(dw, wk.grad, torch.float32, "dweight")


def test_llama_rounding_first_order_matches_kernels(device):
    """rounding="llama": dweight sums dy * (x * r rounded to x's dtype), as the kernel does; the
    rounding is straight-through for dx."""
    x = _leaf(4, 16, device=device, dtype=torch.float16)
    w = _leaf(16, device=device, dtype=torch.float32)
    dy = torch.randn(4, 16, device=device, dtype=torch.float32)
    kernel = torch.autograd.grad(rk.rmsnorm(x, w, 1e-6, rounding="llama"), (x, w), dy)
    double_backward.CALLS["differentiable_backward"] = 0
    y = rk.rmsnorm(x, w, 1e-6, rounding="llama")
    graph = torch.autograd.grad(y, (x, w), dy, create_graph=True)
    assert double_backward.CALLS["differentiable_backward"] == 1
    assert graph[0].dtype == torch.float16 and graph[1].dtype == torch.float32
    assert_close(graph[0], kernel[0], torch.float16, "dx")
    assert_close(graph[1], kernel[1], torch.float32, "dweight")


def test_llama_rounding_gradgradcheck_fp64(device):
    x, w = _leaf(2, 3, device=device), _leaf(3, device=device)
    r = _leaf(2, 3, device=device)
    fn = lambda a, b, c: rk.rmsnorm(a, c, 1e-6, residual=b, rounding="llama")  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (x, r, w))

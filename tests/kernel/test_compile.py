"""``torch.compile(fullgraph=True)`` traces the registered op with no graph break."""

from __future__ import annotations

import torch
from kernel_helpers import assert_close, oracle_y

import rmsnorm_kernel as rk
from rmsnorm_kernel.function import default_eps


def test_compile_fullgraph_forward_backward(device):
    torch._dynamo.reset()

    def block(x, r, w):
        y, h = rk.rmsnorm(torch.sin(x), w, 1e-6, residual=r)
        return (y * 2).sum() + h.square().mean()

    x = torch.randn(4, 3, 96, device=device, requires_grad=True)
    r = torch.randn(4, 3, 96, device=device, requires_grad=True)
    w = torch.randn(96, device=device, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True)
    rk.reset_calls()
    loss = compiled(x, r, w)
    loss.backward()
    assert rk.CALLS == {"forward": 1, "backward": 1}, "the compiled graph must call our kernels"
    grads = [t.grad.clone() for t in (x, r, w)]
    for t in (x, r, w):
        t.grad = None
    eager = block(x, r, w)
    eager.backward()
    assert_close(loss, eager, torch.float32, "loss")
    for got, t, name in zip(grads, (x, r, w), ("dx", "dr", "dw"), strict=True):
        assert_close(got, t.grad, torch.float32, name)


def test_compiled_module_no_weight(device):
    torch._dynamo.reset()
    norm = rk.RMSNorm(64, elementwise_affine=False, device=device)
    compiled = torch.compile(norm, fullgraph=True)
    x = torch.randn(5, 64, device=device)
    assert_close(
        compiled(x),
        oracle_y(x, None, default_eps(x.dtype)),
        torch.float32,
        "y",
    )


def test_compiled_backward_without_a_weight(device):
    """No weight: the backward op returns two empty outputs (dweight, dx2), which must be two
    tensors (a custom op's outputs may not alias each other): compiled and traced backward."""
    torch._dynamo.reset()
    x = torch.randn(2, 64, device=device, requires_grad=True)
    compiled = torch.compile(lambda t: rk.rms_norm(t, (64,)).square().sum(), fullgraph=True)
    compiled(x).backward()
    got = x.grad.clone()
    x.grad = None
    rk.rms_norm(x, (64,)).square().sum().backward()
    assert_close(got, x.grad, torch.float32, "dx")
    norm = rk.RMSNorm(64, elementwise_affine=False, device=device)
    torch.jit.trace(norm, (x,))(x).sum().backward()  # traced: the op itself runs
    dy, rstd = torch.randn(2, 64, device=device), torch.ones(2, device=device)
    _, dw, dx2 = torch.ops.rmsnorm_kernel.rmsnorm_bwd(dy, None, dy, None, rstd, 0.0, False)
    assert dw.numel() == dx2.numel() == 0 and dw is not dx2


def test_opcheck(device):
    """torch.library's own consistency checks of the fake impl, schema and autograd registration."""
    x = torch.randn(3, 40, device=device, requires_grad=True)
    w = torch.randn(40, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.rmsnorm_kernel.rmsnorm_fwd.default, (x, w, None, 1e-6, 0.0))
    r = torch.randn(3, 40, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.rmsnorm_kernel.rmsnorm_fwd.default, (x, w, r, 1e-6, 1.0))


def test_opcheck_backward_op(device):
    """The same checks of the backward op, with and without dh (what ``inductor_fusion`` passes
    in), with Llama's rounding on 16-bit rows, and with dy's parts."""
    x = torch.randn(3, 40, device=device)
    w = torch.randn(40, device=device)
    _, _, rstd = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, None, 1e-6, 0.0, False)
    dy, dh = torch.randn(3, 40, device=device), torch.randn(3, 40, device=device)
    bwd = torch.ops.rmsnorm_kernel.rmsnorm_bwd.default
    torch.library.opcheck(bwd, (dy, None, x, w, rstd, 0.0, False))
    torch.library.opcheck(bwd, (dy, dh, x, w, rstd, 1.0, False))
    half = [t.bfloat16() for t in (dy, dh, x)]
    torch.library.opcheck(bwd, (half[0], half[1], half[2], w, rstd, 0.0, True))
    # the gradient-sum parts (``inductor_dy_sums``): two, three, and bfloat16 ones summed in float32
    b, c = torch.randn(3, 40, device=device), torch.randn(3, 40, device=device)
    torch.library.opcheck(bwd, (dy, dh, x, w, rstd, 0.0, False, b))
    torch.library.opcheck(bwd, (dy, None, x, w, rstd, 0.0, False, b, c))
    parts = [t.bfloat16() for t in (dy, b, c)]
    torch.library.opcheck(bwd, (parts[0], None, x, w, rstd, 0.0, False, *parts[1:], torch.float32))
    # and dx's bfloat16 copy (the dx cast)
    torch.library.opcheck(bwd, (dy, dh, x, w, rstd, 0.0, False, None, None, None, torch.bfloat16))


def test_double_backward_through_the_op(device):
    """Eagerly, the op's backward is differentiable (the exact PyTorch-ops formula); compiled, the
    first-order backward runs the kernels and differentiating it again is torch's clear error."""
    x = torch.randn(3, 8, device=device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, device=device, dtype=torch.float64, requires_grad=True)
    y, _, _ = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, None, 1e-6, 0.0)
    (gx,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
    got = torch.autograd.grad(gx.sin().sum(), (x, w))
    (gx_ref,) = torch.autograd.grad(
        rk.rmsnorm_reference(x, w, 1e-6).pow(2).sum(), x, create_graph=True
    )
    want = torch.autograd.grad(gx_ref.sin().sum(), (x, w))
    for a, b, name in zip(got, want, ("dx", "dweight"), strict=True):
        assert_close(a, b, torch.float64, name)

    torch._dynamo.reset()
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    compiled = torch.compile(lambda a, b: rk.rmsnorm(a, b, 1e-6).square().sum(), fullgraph=True)
    rk.reset_calls()
    (gx,) = torch.autograd.grad(compiled(xf, wf), xf, create_graph=True)
    assert rk.CALLS == {"forward": 1, "backward": 1}, "compiled: the kernels, forward and backward"
    try:
        torch.autograd.grad(gx.square().sum(), wf)
    except RuntimeError as err:
        assert "double backward" in str(err)
    else:
        raise AssertionError("double backward through a compiled graph must raise")

    # The backward op itself is not differentiable: a clear error, never a silent zero.
    rstd = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, None, 1e-6, 0.0)[2]
    dy = torch.randn_like(x, requires_grad=True)
    dx, _, _ = torch.ops.rmsnorm_kernel.rmsnorm_bwd(dy, None, x.detach(), w.detach(), rstd, 0.0)
    try:
        dx.sum().backward()
    except RuntimeError as err:
        assert "rmsnorm_bwd" in str(err) and "double backward" in str(err)
    else:
        raise AssertionError("differentiating rmsnorm_bwd must raise")

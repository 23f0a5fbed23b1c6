"""``rmsnorm_kernel.RMSNorm`` is a drop-in for ``torch.nn.RMSNorm``."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, oracle_y

import rmsnorm_kernel as rk


@pytest.mark.parametrize("shape", [16, (16,), (4, 8)])
@pytest.mark.parametrize("affine", [True, False])
def test_same_state_dict_and_attributes(shape, affine):
    ours, theirs = (
        rk.RMSNorm(shape, elementwise_affine=affine),
        torch.nn.RMSNorm(shape, elementwise_affine=affine),
    )
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert ours.normalized_shape == theirs.normalized_shape
    assert ours.eps == theirs.eps and ours.elementwise_affine == theirs.elementwise_affine
    assert repr(ours).split("(", 1)[1] == repr(theirs).split("(", 1)[1]
    if affine:
        assert torch.equal(ours.weight, theirs.weight)
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())


@pytest.mark.parametrize("eps", [None, 1e-5])
@pytest.mark.parametrize("shape,normalized", [((3, 5, 32), 32), ((2, 6, 4, 8), (4, 8))])
def test_matches_torch_rmsnorm(shape, normalized, eps, device):
    theirs = torch.nn.RMSNorm(normalized, eps=eps, device=device)
    with torch.no_grad():
        theirs.weight.normal_()
    ours = rk.RMSNorm(normalized, eps=eps, device=device)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(*shape, device=device)
    xo, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    yo, yt = ours(xo), theirs(xt)
    dy = torch.randn_like(yt)
    yo.backward(dy)
    yt.backward(dy)
    assert_close(yo, yt, torch.float32, "y")
    assert_close(xo.grad, xt.grad, torch.float32, "dx")
    assert_close(ours.weight.grad, theirs.weight.grad, torch.float32, "dweight")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_eps_none_is_what_torch_adds_the_compute_types_machine_epsilon(device, dtype):
    """eps=None is float32's epsilon for 16-bit x (float64's for float64), as ATen computes
    F.rms_norm, not finfo(x.dtype).eps as PyTorch's docs say: with a bfloat16 x of std 0.02
    that rule gave rows of RMS 0.22 where torch.nn.RMSNorm gives 1."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = (0.02 * torch.randn(8, 64, generator=gen)).to(device=device, dtype=dtype)
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    expected = oracle_y(x, None, torch.finfo(compute).eps)
    theirs = torch.nn.RMSNorm(64, eps=None, device=device, dtype=dtype)
    ours = rk.RMSNorm(64, eps=None, device=device, dtype=dtype)
    for name, y in (
        ("RMSNorm", ours(x)),
        ("rms_norm", rk.rms_norm(x, (64,))),
        ("rmsnorm", rk.rmsnorm(x, None, None)),
    ):
        assert_close(y, expected, dtype, f"{name} y")
        assert_close(y, theirs(x), dtype, f"{name} y against torch.nn.RMSNorm")
    rms = ours(x).double().pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones_like(rms), atol=0.02), rms


def test_module_runs_the_kernel(device):
    norm = rk.RMSNorm(8, device=device)
    rk.reset_calls()
    norm(torch.randn(2, 8, device=device, requires_grad=True)).sum().backward()
    assert rk.CALLS == {"forward": 1, "backward": 1}


def test_dtype_and_device_factory_kwargs(device):
    norm = rk.RMSNorm(8, device=device, dtype=torch.float64)
    assert norm.weight.dtype == torch.float64 and norm.weight.device.type == device


@pytest.mark.parametrize(
    "shape,normalized", [((4, 33), (33,)), ((2, 3, 4, 8), (4, 8)), ((5, 7), 7), ((3, 2, 6), [2, 6])]
)
@pytest.mark.parametrize("affine", [True, False])
def test_functional_matches_torch(shape, normalized, affine, device):
    x = torch.randn(*shape, device=device)
    ns = (normalized,) if isinstance(normalized, int) else tuple(normalized)
    w = torch.randn(ns, device=device) if affine else None
    expected = torch.nn.functional.rms_norm(x, ns, w, 1e-6)  # torch takes a list/tuple only
    assert_close(rk.rms_norm(x, normalized, w, 1e-6), expected, torch.float32, "y")
    assert_close(
        rk.rms_norm(x, normalized, w),
        torch.nn.functional.rms_norm(x, ns, w),
        torch.float32,
        "y with eps=None",
    )


def test_functional_refuses_wrong_shapes(device):
    x = torch.randn(3, 8, device=device)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        rk.rms_norm(x, (7,))
    with pytest.raises(RuntimeError, match="weight to be of same shape as normalized_shape"):
        rk.rms_norm(x, (8,), torch.ones(4, device=device))


@pytest.mark.parametrize("normalized", [32, (4, 8)])
def test_fx_symbolic_trace_records_one_call_that_runs_the_kernel(normalized, device):
    """``torch.fx.symbolic_trace`` (quantization, pipeline splitting, HF's fx tracer) sees
    ``rms_norm`` as one leaf call, as it sees ``F.rms_norm``; the traced model runs the kernel
    and gives the model's values and gradients."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = rk.RMSNorm(normalized, eps=1e-6, device=device)
            self.proj = torch.nn.Linear(32, 32, device=device)

        def forward(self, x):
            return self.proj(self.norm(x).flatten(2))

    net = Net()
    with torch.no_grad():
        net.norm.weight.normal_()
    traced = torch.fx.symbolic_trace(net)
    calls = [n.target for n in traced.graph.nodes if n.op == "call_function"]
    assert calls.count(rk.module.rms_norm) == 1, calls
    x = torch.randn(3, 5, *((32,) if normalized == 32 else (4, 8)), device=device)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    rk.reset_calls()
    ya, yb = traced(xa), net(xb)
    assert rk.CALLS["forward"] == 2
    assert torch.equal(ya, yb)
    dy = torch.randn_like(ya)
    ya.backward(dy)
    yb.backward(dy)
    assert rk.CALLS["backward"] == 2
    assert torch.equal(xa.grad, xb.grad)
    with torch.no_grad():
        rows = x.flatten(2)  # (3, 5, 32): the normalised dims as one row
        expected = net.proj(oracle_y(rows, net.norm.weight.reshape(-1)).float())
    assert_close(ya, expected, torch.float32, "traced model against the oracle's norm")

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


def test_eps_none_is_machine_epsilon_of_input_dtype(device):
    x = torch.full((1, 4), 1e-4, device=device, dtype=torch.float16)  # eps dominates mean(x^2)
    norm = rk.RMSNorm(4, eps=None, device=device, dtype=torch.float16)
    expected = oracle_y(x, norm.weight, torch.finfo(torch.float16).eps)
    assert_close(norm(x), expected, torch.float16, "y")


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

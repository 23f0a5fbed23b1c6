"""Meta and fake tensors (``FakeTensorMode`` outside torch.compile, as memory and shape
estimators use it; models built under ``torch.device("meta")``): no kernel runs, and the outputs
and gradients have exactly the shapes and dtypes a real call gives. Bad input is refused as on a
real device."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import rmsnorm_kernel as rk

CASES = [
    # (x dtype, weight dtype or None, residual dtype or None, rounding)
    (torch.float32, torch.float32, None, "torch"),
    (torch.bfloat16, torch.float32, None, "llama"),
    (torch.float16, torch.float16, torch.float16, "torch"),
    (torch.bfloat16, torch.bfloat16, torch.float32, "torch"),
    (torch.float64, None, None, "torch"),
]


def _call(device, xd, wd, rd, rounding):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, dtype=xd, device=device, requires_grad=True)
    w = None if wd is None else torch.randn(16, dtype=wd, device=device, requires_grad=True)
    r = None if rd is None else torch.randn(2, 3, 16, dtype=rd, device=device, requires_grad=True)
    out = rk.rmsnorm(x, w, 1e-6, residual=r, rounding=rounding)
    outs = out if isinstance(out, tuple) else (out,)
    leaves = [t for t in (x, w, r) if t is not None]
    grads = torch.autograd.grad(sum(o.float().sum() for o in outs), leaves)
    return [(tuple(t.shape), t.dtype) for t in (*outs, *grads)]


@pytest.mark.parametrize(("xd", "wd", "rd", "rounding"), CASES)
def test_meta_and_fake_match_a_real_call(device, xd, wd, rd, rounding):
    real = _call(device, xd, wd, rd, rounding)
    before = dict(rk.CALLS)
    assert _call("meta", xd, wd, rd, rounding) == real
    with FakeTensorMode():  # fake tensors of the kernels' own device
        assert _call(device, xd, wd, rd, rounding) == real
    assert rk.CALLS == before, "no kernel ran for meta or fake tensors"


def test_a_model_built_on_meta_runs_on_meta():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), rk.RMSNorm(8, eps=1e-6))
        y = model(torch.empty(4, 8))
    assert y.shape == (4, 8) and y.is_meta


def test_meta_input_is_still_checked():
    x = torch.empty(2, 8, device="meta")
    with pytest.raises(rk.ContractValueError, match="eps must be"):
        rk.rmsnorm(x, None, -1.0)
    with pytest.raises(rk.ContractValueError, match="weight must be on x's device"):
        rk.rmsnorm(x, torch.ones(8), 1e-6)


def test_jit_trace_records_the_op_not_a_constant(device):
    """``torch.jit.trace`` records dispatcher ops: the norm goes through the registered op, so
    the traced module computes it for new inputs (other shapes too) instead of replaying the
    traced call's output, and its backward runs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), rk.RMSNorm(8, eps=1e-6)).to(device)
    with warnings.catch_warnings():  # the contract's Python shape checks: TracerWarnings
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(model, torch.randn(2, 8, device=device))
    assert "rmsnorm_kernel::rmsnorm_fwd" in str(traced.inlined_graph)
    x = torch.randn(5, 8, device=device, requires_grad=True)
    torch.testing.assert_close(traced(x), model(x), atol=0.0, rtol=0.0)
    traced(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_jit_trace_of_eps_none_warns_that_the_value_is_kept(device):
    """F.rms_norm's trace keeps eps=None and resolves it per call; the op takes a float, so a
    trace keeps the traced input's epsilon: said with a TracerWarning (a float64 input to a
    float32 trace would otherwise get float32's epsilon silently)."""
    with pytest.warns(torch.jit.TracerWarning, match="eps=None was resolved to 1.19"):
        torch.jit.trace(rk.RMSNorm(8).to(device), torch.randn(2, 8, device=device))
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch.jit.TracerWarning)
        rk.RMSNorm(8).to(device)(torch.randn(2, 8, device=device))  # untraced: no warning


def test_jit_script_is_refused_by_name():
    """TorchScript cannot compile a forward that launches Triton kernels from Python: scripting
    the module, alone or inside a model, says so and names what works instead."""
    with pytest.raises(TypeError, match="cannot be compiled by torch.jit.script.*torch.jit.trace"):
        torch.jit.script(rk.RMSNorm(8))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), rk.RMSNorm(8))
    with pytest.raises(TypeError, match="rmsnorm_kernel.RMSNorm cannot be compiled"):
        torch.jit.script(model)

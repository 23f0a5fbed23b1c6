"""Liger's fused add + RMSNorm (``integrations.liger.fused_add``) and its per-model norm classes
(``integrations.liger.models``) against float64 references of Liger's formula.

The fused add's reference: ``S = X + R`` rounded to X's dtype (straight-through), then Liger's
norm of that S (``peer_refs.liger_ref``), differentiated with gradients for both Y and S, as
Liger's own test (``test/transformers/test_fused_add_rms_norm.py``) backpropagates both.
"""

from __future__ import annotations

import re

import pytest
import torch
from peer_refs import (
    BF16,
    DEVICE,
    DTYPES,
    EPS,
    F16,
    F32,
    SHAPES,
    close,
    f64,
    leaf,
    liger_ref,
    loosest,
    make_w,
    make_x,
    st_round,
)

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations import liger


@pytest.fixture(autouse=True)
def _on_the_kernels_device():
    with torch.device(DEVICE):
        yield


OFFSET = {"llama": 0.0, "gemma": 1.0, "none": 0.5}


def fused_ref(x, r, w, offset, mode, dtype):
    s = st_round(x + r, dtype)
    return liger_ref(s, w, offset, mode, dtype), s


@pytest.mark.parametrize("w_kind", ["float32", "x", "none"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["llama", "gemma", "none"])
def test_fused_add_against_its_formula(mode, dtype, shape, w_kind):
    offset = OFFSET[mode] if w_kind != "none" else 0.0
    w_dtype = F32 if w_kind == "float32" else dtype
    x, r = leaf(make_x(shape, dtype)), leaf(make_x(shape, dtype, scale=2.0))
    w = None if w_kind == "none" else leaf(make_w(shape[-1], w_dtype, offset))
    y, s = liger.liger_fused_add_rms_norm(x, r, w, EPS, offset=offset, casting_mode=mode)
    assert y.shape == s.shape == x.shape and y.dtype == s.dtype == dtype
    assert torch.equal(s, x.detach() + r.detach())  # one rounding of the sum, as torch's add
    # Y is the norm of the stored S, bit for bit the unfused drop-in's
    assert torch.equal(y, liger.liger_rms_norm(s.detach(), w, EPS, offset, mode))
    dy, ds = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    grads_before = dy.clone(), ds.clone()
    torch.autograd.backward((y, s), (dy, ds))
    assert torch.equal(dy, grads_before[0]) and torch.equal(ds, grads_before[1])
    xd, rd = f64(x), f64(r)
    wd = None if w is None else f64(w)
    y_ref, s_ref = fused_ref(xd, rd, wd, offset, mode, dtype)
    torch.autograd.backward((y_ref, s_ref), (dy.double(), ds.double()))
    close(y, y_ref, dtype, "Y")
    assert x.grad.dtype == r.grad.dtype == dtype
    assert torch.equal(x.grad, r.grad)  # one gradient, as Liger returns dX and dR
    close(x.grad, xd.grad, dtype, "dX")
    if w is not None:
        assert w.grad.dtype == w_dtype
        close(w.grad, wd.grad, loosest(dtype, w_dtype), "dW")


def test_fused_add_gradient_of_one_output_only():
    """Only Y used (S's gradient None) or only S used: the other part of dX is zero."""
    x, r, w = leaf(make_x((3, 37), BF16)), leaf(make_x((3, 37), BF16)), leaf(make_w(37, BF16))
    y, _ = liger.liger_fused_add_rms_norm(x, r, w, EPS)
    dy = torch.randn(3, 37).to(BF16)
    y.backward(dy)
    xd, rd, wd = f64(x), f64(r), f64(w)
    fused_ref(xd, rd, wd, 0.0, "llama", BF16)[0].backward(dy.double())
    close(x.grad, xd.grad, BF16, "dX from Y alone")
    assert torch.equal(x.grad, r.grad)
    x2, r2 = leaf(x), leaf(r)
    _, s = liger.LigerFusedAddRMSNormFunction.apply(x2, r2, w, EPS)
    s.sum().backward()
    assert torch.equal(x2.grad, torch.ones_like(x2)) and torch.equal(r2.grad, x2.grad)


def test_fused_add_module_function_and_codes_agree():
    x, r = make_x((2, 3, 37), F16), make_x((2, 3, 37), F16)
    m = liger.LigerFusedAddRMSNorm(37, eps=1e-5, offset=1.0, casting_mode="gemma", init_fn="zeros")
    with torch.no_grad():
        m.weight.normal_(0.0, 0.3)
    y, s = m(x, r)
    for other in (
        liger.liger_fused_add_rms_norm(x, r, m.weight, 1e-5, 1.0, "gemma", False),
        liger.LigerFusedAddRMSNormFunction.apply(x, r, m.weight, 1e-5, 1.0, 1, True),
    ):
        assert torch.equal(y, other[0]) and torch.equal(s, other[1])
    close(y, fused_ref(x.double(), r.double(), m.weight.double(), 1.0, "gemma", F16)[0], F16, "Y")


def test_fused_add_module_attributes_state_and_repr():
    m = liger.LigerFusedAddRMSNorm(37)
    assert (m.variance_epsilon, m.offset, m.casting_mode, m.in_place) == (1e-6, 0.0, "llama", False)
    assert isinstance(m.weight, torch.nn.Parameter) and m.weight.dtype == F32
    assert torch.equal(m.weight, torch.ones(37)) and list(m.state_dict()) == ["weight"]
    assert repr(m) == "LigerFusedAddRMSNorm((37,), eps=1e-06, offset=0.0, in_place=False)"
    z = liger.LigerFusedAddRMSNorm(8, 1e-5, 1.0, "gemma", "zeros", True)
    assert torch.equal(z.weight, torch.zeros(8)) and z.in_place is True


#: Liger's per-model classes and the defaults its main branch gives each (hidden size 8).
MODELS = {
    "LigerRMSNormForGemma": dict(offset=1.0, casting_mode="gemma", init=0.0, in_place=True),
    "LigerRMSNormForGemma2": dict(offset=1.0, casting_mode="gemma", init=0.0, in_place=False),
    "LigerRMSNormForGemma3": dict(offset=1.0, casting_mode="gemma", init=0.0, in_place=False),
    "LigerRMSNormForGemma4": dict(offset=0.0, casting_mode="gemma", init=1.0, in_place=False),
    "LigerRMSNormForOlmo2": dict(offset=0.0, casting_mode="llama", init=1.0, in_place=False),
    "LigerRMSNormForGlm4": dict(offset=0.0, casting_mode="llama", init=1.0, in_place=False),
    "LigerRMSNormForQwen3Next": dict(offset=1.0, casting_mode="gemma", init=0.0, in_place=False),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_classes_defaults_and_formula(name):
    want = MODELS[name]
    m = getattr(liger, name)(8)
    assert isinstance(m, liger.LigerRMSNorm)
    assert (m.variance_epsilon, m.offset, m.casting_mode, m.in_place, m.row_mode) == (
        1e-6,
        want["offset"],
        want["casting_mode"],
        want["in_place"],
        None,
    )
    assert torch.equal(m.weight, torch.full((8,), want["init"]))
    with torch.no_grad():
        m.weight.add_(torch.randn(8) * 0.3)
    x = make_x((5, 8), BF16)
    ref = liger_ref(x.double(), m.weight.double(), want["offset"], want["casting_mode"], BF16)
    close(m(x), ref, BF16, name)


def test_gemma4_without_scale_is_hugging_faces_formula():
    """Gemma 4's ``with_scale=False`` norm: no weight, float32 math, one rounding (Hugging Face's
    ``(x.float() * pow(mean(x**2) + eps, -0.5)).to(dtype)``, which Liger runs in PyTorch)."""
    m = liger.LigerRMSNormForGemma4(37, with_scale=False)
    assert m.weight is None and m.with_scale is False and list(m.state_dict()) == []
    x = leaf(make_x((4, 37), BF16))
    y = m(x)
    xf = x.detach().float()
    hf = (xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + 1e-6, -0.5)).to(BF16)
    assert y.dtype == BF16
    close(y, hf, BF16, "Gemma 4 v_norm")
    y.sum().backward()
    assert x.grad is not None and x.grad.dtype == BF16


with torch.device(DEVICE):
    X8, R8 = make_x((3, 8), BF16), make_x((3, 8), BF16)
    W8 = torch.ones(8, dtype=BF16)

REFUSALS = {
    "R shape": (lambda: liger.liger_fused_add_rms_norm(X8, R8[:2], W8, EPS), ValueError, "R"),
    "R dtype": (
        lambda: liger.liger_fused_add_rms_norm(X8, R8.float(), W8, EPS), ValueError, "R must"
    ),
    "R type": (lambda: liger.liger_fused_add_rms_norm(X8, 1.0, W8, EPS), TypeError, "R must"),
    "R None": (lambda: liger.LigerFusedAddRMSNorm(8)(X8, None), TypeError, "R must"),
    "X type": (lambda: liger.liger_fused_add_rms_norm([1.0], R8, W8, EPS), TypeError, "X"),
    "W shape": (lambda: liger.liger_fused_add_rms_norm(X8, R8, W8[:5], EPS), ValueError, "W"),
    "W device": (
        lambda: liger.liger_fused_add_rms_norm(X8, R8, W8.to("meta"), EPS), ValueError,
        "W must be on X's device",
    ),
    "X int": (
        lambda: liger.liger_rms_norm(X8.long(), None, EPS), TypeError, "X must have dtype"
    ),
    "casting_mode": (
        lambda: liger.LigerFusedAddRMSNormFunction.apply(X8, R8, W8, EPS, 0.0, "fp32"),
        ValueError, "casting_mode",
    ),
    "eps": (lambda: liger.liger_fused_add_rms_norm(X8, R8, W8, None), TypeError, "eps"),
    "module init_fn": (
        lambda: liger.LigerFusedAddRMSNorm(8, init_fn="normal"), ValueError, "init_fn"
    ),
    "module casting_mode": (
        lambda: liger.LigerFusedAddRMSNorm(8, casting_mode="bf16"), ValueError, "casting_mode"
    ),
    "megatron hidden_size float": (
        lambda: liger.LigerMegatronRMSNorm(None, 8.0), TypeError, "hidden_size must be an int"
    ),
    "model init_fn": (
        lambda: liger.LigerRMSNormForGemma(8, init_fn="normal"), ValueError, "init_fn"
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_name_the_argument_before_any_kernel(case):
    call, error, name = REFUSALS[case]
    before = X8.clone(), R8.clone()
    with pytest.raises(error, match=re.escape(name)):
        call()
    assert rk.CALLS["forward"] == 0, "a kernel ran before the refusal"
    assert torch.equal(X8, before[0]) and torch.equal(R8, before[1])


def test_fused_add_float64_weight_beside_half_x():
    """Llama mode with a float64 W: the rounded ``x * r`` times the float64 ``offset + W``, stored
    in X's dtype, as for the unfused drop-in."""
    x, r, w = (
        leaf(make_x((3, 40), F16)),
        leaf(make_x((3, 40), F16)),
        leaf(make_w(40, torch.float64)),
    )
    y, s = liger.liger_fused_add_rms_norm(x, r, w, EPS)
    assert y.dtype == s.dtype == F16
    assert torch.equal(y, liger.liger_rms_norm(s.detach(), w, EPS))
    y.backward(torch.ones_like(y))
    xd, rd, wd = f64(x), f64(r), f64(w)
    fused_ref(xd, rd, wd, 0.0, "llama", F16)[0].backward(torch.ones(3, 40, dtype=torch.float64))
    close(x.grad, xd.grad, F16, "dX")
    assert w.grad.dtype == torch.float64 and torch.equal(x.grad, r.grad)

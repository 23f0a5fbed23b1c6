"""Liger's modulated RMSNorm (``integrations.liger.modulated``): ``(1 + scale) * RMSNorm(X) +
shift`` against a float64 reference of Liger's formula (its norm: ``peer_refs.liger_ref``), for
each way scale and shift broadcast (one row for all, one per batch, one per row), gradients of X,
W, scale and shift included; and the arguments Liger asserts, refused by name."""

from __future__ import annotations

import re

import pytest
import torch
from peer_refs import (
    BF16,
    DEVICE,
    EPS,
    F16,
    F32,
    close,
    f64,
    leaf,
    liger_ref,
    loosest,
    make_w,
    make_x,
)

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations import liger


@pytest.fixture(autouse=True)
def _on_the_kernels_device():
    with torch.device(DEVICE):
        yield


SHAPE = (2, 3, 37)
OFFSET = {"llama": 0.0, "gemma": 1.0, "none": 0.5}


def modulation(scale_mode, dtype):
    rows = {"global": (37,), "batch": (2, 37), "row": SHAPE}[scale_mode]
    return (torch.randn(rows) * 0.1).to(dtype), (torch.randn(rows) * 0.1).to(dtype)


def reference(x, w, scale, shift, offset, mode, dtype):
    """Liger's norm in float64, then the modulation row of each block of consecutive rows."""
    y = liger_ref(x, w, offset, mode, dtype)
    k = scale.numel() // 37
    out = y.reshape(k, -1, 37) * (1 + scale.reshape(k, 1, 37))
    if shift is not None:
        out = out + shift.reshape(k, 1, 37)
    return out.reshape(x.shape)


def run_case(mode, x_dtype, w_dtype, mod_dtype, scale_mode, has_shift):
    offset = OFFSET[mode] if w_dtype is not None else 0.0
    x = leaf(make_x(SHAPE, x_dtype))
    w = None if w_dtype is None else leaf(make_w(37, w_dtype, offset))
    scale, shift = (leaf(t) for t in modulation(scale_mode, mod_dtype))
    shift = shift if has_shift else None
    y = liger.liger_modulated_rms_norm(x, w, scale, shift, EPS, offset, mode)
    assert y.shape == x.shape and y.dtype == x_dtype  # Liger stores Y in X's dtype
    dy = torch.randn(SHAPE).to(x_dtype)
    y.backward(dy)
    xd, sd = f64(x), f64(scale)
    wd = None if w is None else f64(w)
    hd = None if shift is None else f64(shift)
    y_ref = reference(xd, wd, sd, hd, offset, mode, x_dtype)
    y_ref.backward(dy.double())
    close(y, y_ref, x_dtype, "Y")
    close(x.grad, xd.grad, loosest(x_dtype, mod_dtype), "dX")
    assert scale.grad.dtype == mod_dtype and scale.grad.shape == scale.shape
    close(scale.grad, sd.grad, loosest(x_dtype, mod_dtype), "dscale")
    if shift is not None:
        assert shift.grad.dtype == mod_dtype
        close(shift.grad, hd.grad, loosest(x_dtype, mod_dtype), "dshift")
    if w is not None:
        assert w.grad.dtype == w_dtype
        close(w.grad, wd.grad, loosest(x_dtype, w_dtype, mod_dtype), "dW")


@pytest.mark.parametrize("scale_mode", ["global", "batch", "row"])
@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
@pytest.mark.parametrize("mode", ["llama", "gemma", "none"])
def test_modulated_against_its_formula(mode, dtype, scale_mode):
    w_dtype = F32 if dtype == BF16 else dtype  # a float32 weight beside bf16 X: Liger's product
    run_case(mode, dtype, w_dtype, dtype, scale_mode, has_shift=True)


@pytest.mark.parametrize("scale_mode", ["global", "batch", "row"])
def test_modulated_without_weight_or_shift_and_float32_modulation(scale_mode):
    """Liger's ``test_mixed_dtype_modulation`` setting (bf16 X, float32 scale and shift, whose
    gradients stay float32), and the weight-less norm without a shift."""
    run_case("llama", BF16, BF16, F32, scale_mode, has_shift=True)
    run_case("gemma", F16, None, F16, scale_mode, has_shift=False)


def test_modulated_module_function_and_attributes():
    m = liger.LigerModulatedRMSNorm(37)
    assert (m.variance_epsilon, m.offset, m.casting_mode, m.in_place) == (1e-6, 0.0, "llama", True)
    assert m.elementwise_affine and torch.equal(m.weight, torch.ones(37))
    assert list(m.state_dict()) == ["weight"]
    assert repr(m) == (
        "LigerModulatedRMSNorm(weight_shape=(37,), eps=1e-06, offset=0.0, casting_mode=llama, "
        "in_place=True)"
    )
    bare = liger.LigerModulatedRMSNorm(37, 1e-5, 1.0, "gemma", "zeros", False, False)
    assert bare.weight is None and "weight_shape=None" in repr(bare)
    x = make_x(SHAPE, BF16)
    scale, shift = modulation("batch", BF16)
    with torch.no_grad():
        m.weight.normal_(1.0, 0.2)
    y = m(x, scale, shift)
    assert torch.equal(
        y, liger.LigerModulatedRMSNormFunction.apply(x, m.weight, scale, shift, 1e-6)
    )
    assert torch.equal(y, liger.liger_modulated_rms_norm(x, m.weight, scale, shift, in_place=False))
    # (B, 1, N) is the same modulation as (B, N): only the element count says the rows
    assert torch.equal(y, m(x, scale[:, None], shift[:, None]))


with torch.device(DEVICE):
    X = make_x(SHAPE, BF16)
    S = torch.zeros(2, 37, dtype=BF16)

MOD = liger.liger_modulated_rms_norm
REFUSALS = {
    "scale rows": (lambda: MOD(X, None, torch.zeros(4, 37)), "scale's 4 rows"),
    "scale width": (lambda: MOD(X, None, torch.zeros(2, 36)), "scale must hold"),
    "scale empty": (lambda: MOD(X, None, torch.zeros(0, 37)), "scale must hold"),
    "scale int": (lambda: MOD(X, None, S.long()), "scale must be"),
    "scale type": (lambda: MOD(X, None, 0.5), "scale must be"),
    "shift size": (lambda: MOD(X, None, S, torch.zeros(37)), "shift must"),
    "X type": (lambda: MOD([1.0], None, S), "X must"),
    "X 0-d": (lambda: MOD(X[0, 0, 0], None, S), "X must have at least 1 dim"),
    "casting_mode": (lambda: MOD(X, None, S, casting_mode="x"), "casting_mode"),
    "init_fn": (lambda: liger.LigerModulatedRMSNorm(37, init_fn="normal"), "init_fn"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSALS))
def test_modulated_refusals_before_any_kernel(case):
    call, name = REFUSALS[case]
    with pytest.raises((ValueError, TypeError), match=re.escape(name)):
        call()
    assert rk.CALLS["forward"] == 0


def test_none_mode_modulates_float32_rows():
    """``"none"``: the rows enter the modulation in float32, so scale's gradient (a sum over 512
    rows) is the float64 sum to within one rounding to bf16, where sums of bf16-rounded rows miss
    small (cancelling) sums by many of their ulps."""
    x = make_x((8, 64, 37), BF16)
    w = make_w(37, BF16)
    scale = leaf((torch.randn(37) * 0.1).to(BF16))
    y = liger.liger_modulated_rms_norm(x, w, scale, None, EPS, 0.0, "none")
    dy = torch.randn(8, 64, 37).to(BF16)
    y.backward(dy)
    xd = x.double()
    rows = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    ref = (dy.double() * rows).sum((0, 1))
    ulp = torch.finfo(BF16).eps * ref.abs().to(BF16).double()  # one bf16 ulp of each sum
    err = (scale.grad.double() - ref).abs()
    assert (err <= ulp + 1e-4).all(), (err - ulp).max()


def test_llama_mode_keeps_the_weighted_rows_float32():
    """Liger's llama mode makes ``offset + W`` float32 whatever W's dtype, so the weighted rows
    reach the modulation unrounded and Y is rounded once: with float16 X, W, scale and shift,
    (nearly) every element is the correctly rounded value of that arithmetic in float64 (the
    one rounding of ``x * r`` to float16 included), where rounding the weighted rows and each
    float16 op misses about a quarter of them."""
    x, w = make_x((64, 64), F16), make_w(64, F16)
    scale, shift = (torch.randn(64) * 0.5).to(F16), torch.randn(64).to(F16)
    y = liger.liger_modulated_rms_norm(x, w, scale, shift, EPS, 0.0, "llama")
    xd = x.double()
    n = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS)).to(F16).double()
    one_plus = (1 + scale).double()  # 1 + scale in float16 (Liger: a float constant + float16)
    want = (n * w.double() * one_plus + shift.double()).to(F16)
    assert (y != want).float().mean() < 0.02, (y != want).float().mean()


def test_the_rows_gradient_is_rounded_as_liger_rounds_it():
    """Liger's backward rounds ``dY * (1 + scale)`` to 16 bits (its ``dRms_row``) before W's
    gradient sums it: W's gradient here is bit for bit the plain norm's for that rounded
    gradient (the kernel's float32 sum, rounded once to W's dtype)."""
    x, w = make_x((4, 16, 37), BF16), make_w(37, BF16)
    scale = (torch.randn(37) * 0.1).to(BF16)
    dy = torch.randn(4, 16, 37).to(BF16)
    w1 = leaf(w)
    liger.liger_modulated_rms_norm(x, w1, scale, None, EPS, 0.0, "llama").backward(dy)
    w2 = leaf(w.float())
    liger.liger_rms_norm(x, w2, EPS, 0.0, "llama").backward(dy * (1 + scale))  # bf16 product
    assert torch.equal(w1.grad, w2.grad.to(BF16))

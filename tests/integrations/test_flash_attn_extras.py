"""flash-attn's ``rms_norm_ref`` / ``layer_norm_ref`` (``integrations.flash_attn_ref``) and
``layer_norm_linear_fn`` (``integrations.flash_attn``), the names flash-attn's own
``tests/ops/triton/test_layer_norm.py`` imports beside ``layer_norm_fn``.

The references are checked against float64 formulas written here; the drop-ins against the
references with flash-attn's own criterion (``|out - ref| <= 2 |pt - ref| + atol``: ``pt`` the
reference in the inputs' dtypes, ``ref`` with ``upcast=True``), and against float64.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from peer_refs import BF16, DEVICE, EPS, F16, F32, close, f64, leaf, make_w, make_x

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations import flash_attn as fa


@pytest.fixture(autouse=True)
def _on_the_kernels_device():
    with torch.device(DEVICE):
        yield


def flash_close(out, pt, ref, atol):
    """flash-attn's test criterion."""
    err = (out.double() - ref.double()).abs().max()
    assert err <= 2 * (pt.double() - ref.double()).abs().max() + atol, err


ATOL = {F32: 1e-4, F16: 1e-2, BF16: 5e-2}


def rms64(x, w, b=None, eps=EPS):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    return y if b is None else y + b


def test_rms_norm_ref_every_argument_against_float64():
    """Dropout by mask, rowscale, the parallel x1 / weight1 / bias1 norm, a bias, the zero-centred
    weight, a residual and prenorm: flash-attn's reference order, in float64."""
    x, x1, res = make_x((3, 5, 24), F32), make_x((3, 5, 24), F32), make_x((3, 5, 24), F32)
    w, w1, b, b1 = make_w(24, F32), make_w(24, F32), make_w(24, F32), make_w(24, F32)
    mask, mask1 = torch.rand(3, 5, 24) > 0.3, torch.rand(3, 5, 24) > 0.3
    p = 0.3
    out, out1, h = fa.rms_norm_ref(x, w, b, res, x1, w1, b1, EPS, p, None, True, True, mask, mask1)
    d = lambda t: t.double()  # noqa: E731
    h64 = d(x).masked_fill(~mask, 0) / (1 - p) + d(x1).masked_fill(~mask1, 0) / (1 - p) + d(res)
    close(h, h64, F32, "h")
    close(out, rms64(h64, d(w) + 1, d(b)), F32, "out")
    close(out1, rms64(h64, d(w1) + 1, d(b1)), F32, "out1")
    rowscale = torch.rand(3, 5) + 0.5
    y = fa.rms_norm_ref(x, w, None, rowscale=rowscale)
    close(y, rms64(d(x) * d(rowscale)[..., None], d(w)), F32, "rowscale")
    with pytest.raises(AssertionError, match="rowscale"):  # flash-attn asserts it
        fa.rms_norm_ref(x, w, None, x1=x1, rowscale=rowscale)


@pytest.mark.parametrize("upcast", [False, True])
def test_references_keep_the_dtypes_flash_attn_gives(upcast):
    x, res, w = make_x((4, 32), BF16), make_x((4, 32), F32), make_w(32, F32)
    out, h = fa.rms_norm_ref(x, w, None, residual=res, prenorm=True, upcast=upcast)
    assert out.dtype == BF16  # x's original dtype
    assert h.dtype == (F32 if upcast else BF16)  # x + residual, cast to (the upcast) x's dtype
    b = make_w(32, F32)
    y = fa.layer_norm_ref(x, w, b, upcast=upcast)  # x in the weight's dtype, out in x's
    assert y.dtype == BF16
    close(y, F.layer_norm(x.double(), (32,), w.double(), b.double(), EPS), BF16, "bf16 x")
    lw, lb = make_w(32, F32), make_w(32, F32)
    ln = fa.layer_norm_ref(x.float(), lw, lb, eps=1e-5)
    close(ln, F.layer_norm(x.double(), (32,), lw.double(), lb.double(), 1e-5), F32, "layer_norm")


@pytest.mark.parametrize(
    "x_dtype,res_dtype,w_dtype",
    [(F16, F16, F32), (F16, F32, F32), (F32, F32, F32), (BF16, BF16, BF16), (BF16, F32, F16)],
    ids=str,
)
@pytest.mark.parametrize("prenorm", [False, True])
@pytest.mark.parametrize("has_residual", [False, True])
def test_rms_norm_fn_by_flash_attns_own_criterion(
    x_dtype, res_dtype, w_dtype, prenorm, has_residual
):
    """flash-attn's ``test_layer_norm`` for the RMS cases this drop-in supports, shapes shrunk."""
    atol = max(ATOL[d] for d in (x_dtype, res_dtype, w_dtype))
    x0 = make_x((2, 16, 192), x_dtype)
    res = make_x((2, 16, 192), res_dtype) if has_residual else None
    w = make_w(192, w_dtype)
    residual_in_fp32 = (not has_residual) and res_dtype == F32
    leaves = [[leaf(t) if t is not None else None for t in (x0, res, w)] for _ in range(3)]
    (x, r, wt), (x_pt, r_pt, w_pt), (x_ref, r_ref, w_ref) = leaves
    out, *rest = fa.layer_norm_fn(
        x, wt, None, residual=r, eps=1e-6, prenorm=prenorm, residual_in_fp32=residual_in_fp32,
        is_rms_norm=True,
    )  # fmt: skip
    out_pt, *rest_pt = fa.rms_norm_ref(x_pt, w_pt, None, residual=r_pt, eps=1e-6, prenorm=prenorm)
    out_ref, *rest_ref = fa.rms_norm_ref(
        x_ref, w_ref, None, residual=r_ref, eps=1e-6, prenorm=prenorm, upcast=True
    )
    assert out.dtype == x_dtype
    if prenorm:
        assert rest[0].dtype == res_dtype
        flash_close(rest[0], rest_pt[0], rest_ref[0], atol)
    flash_close(out, out_pt, out_ref, atol)
    g = torch.randn_like(out) / 2
    if prenorm:
        (out * torch.sigmoid(rest[0])).backward(g)
        (out_pt * torch.sigmoid(rest_pt[0])).backward(g)
        (out_ref * torch.sigmoid(rest_ref[0].to(res_dtype))).backward(g)
    else:
        for o in (out, out_pt, out_ref):
            o.backward(g)
    flash_close(x.grad, x_pt.grad, x_ref.grad, atol)
    if has_residual:
        flash_close(r.grad, r_pt.grad, r_ref.grad, atol)
    flash_close(wt.grad, w_pt.grad, w_ref.grad, atol)


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("has_residual", [False, True])
@pytest.mark.parametrize("prenorm", [False, True])
def test_layer_norm_linear_fn_against_float64(prenorm, has_residual, autocast):
    x, w = leaf(make_x((2, 8, 48), BF16)), leaf(make_w(48, F32))
    res = leaf(make_x((2, 8, 48), F32)) if has_residual else None
    lw, lb = leaf(make_w((96, 48), F32) / 7), leaf(make_w(96, F32))
    with torch.autocast(DEVICE, dtype=BF16, enabled=autocast):
        got = fa.layer_norm_linear_fn(
            x, w, None, lw, lb, residual=res, prenorm=prenorm, is_rms_norm=True
        )
    out, h = got if prenorm else (got, None)
    assert out.dtype == BF16  # the autocast dtype, or y's (x's) without autocast
    if prenorm:
        assert h.dtype == (F32 if has_residual else BF16)
    g = torch.randn_like(out)
    out.backward(g)
    xd, wd, lwd, lbd = f64(x), f64(w), f64(lw), f64(lb)
    rd = f64(res) if has_residual else None
    hd = xd if rd is None else xd + rd
    yd = rms64(hd, wd)
    yd = yd + (yd.detach().to(BF16).double() - yd.detach())  # y stored in bf16 (straight-through)
    out_ref = F.linear(yd, lwd, lbd)
    out_ref.backward(g.double())
    # one bf16 rounding of y, of the linear's weight and of its output: bf16's tolerance
    close(out, out_ref, BF16, "out")
    close(x.grad, xd.grad, BF16, "dx")
    close(w.grad, wd.grad, BF16, "dnorm_weight")
    close(lw.grad, lwd.grad, BF16, "dlinear_weight")
    close(lb.grad, lbd.grad, BF16, "dlinear_bias")
    assert lw.grad.dtype == lb.grad.dtype == F32 and x.grad.dtype == BF16
    if has_residual:
        close(res.grad, rd.grad, BF16, "dresidual")


with torch.device(DEVICE):
    X, W = make_x((3, 8), BF16), make_w(8, BF16)
    LW, LB = make_w((16, 8), BF16), make_w(16, BF16)

REFUSALS = {
    "LayerNorm": (
        lambda: fa.layer_norm_linear_fn(X, W, None, LW, LB), NotImplementedError, "is_rms_norm"
    ),
    "norm_bias": (
        lambda: fa.layer_norm_linear_fn(X, W, W, LW, LB, is_rms_norm=True), NotImplementedError,
        "norm_bias",
    ),
    "linear_weight shape": (
        lambda: fa.layer_norm_linear_fn(X, W, None, LW.t(), None, is_rms_norm=True), ValueError,
        "linear_weight",
    ),
    "linear_bias shape": (
        lambda: fa.layer_norm_linear_fn(X, W, None, LW, LB[:3], is_rms_norm=True), ValueError,
        "linear_bias",
    ),
    "linear_weight type": (
        lambda: fa.layer_norm_linear_fn(X, W, None, [1.0], None, is_rms_norm=True), TypeError,
        "linear_weight",
    ),
    "norm_weight None": (
        lambda: fa.layer_norm_linear_fn(X, None, None, LW, None, is_rms_norm=True), TypeError,
        "norm_weight",
    ),
    "norm_weight shape": (
        lambda: fa.layer_norm_linear_fn(X, W[:5], None, LW, None, is_rms_norm=True), ValueError,
        "norm_weight",
    ),
    "linear_weight device": (
        lambda: fa.layer_norm_linear_fn(X, W, None, LW.to("meta"), None, is_rms_norm=True),
        ValueError, "linear_weight must be on x's device",
    ),
    "linear_bias device": (
        lambda: fa.layer_norm_linear_fn(X, W, None, LW, LB.to("meta"), is_rms_norm=True),
        ValueError, "linear_bias must be on x's device",
    ),
    "x 0-d": (
        lambda: fa.layer_norm_linear_fn(X[0, 0], W, None, LW, None, is_rms_norm=True),
        ValueError, "x must have at least 1 dim",
    ),
    "linear_bias dtype": (
        lambda: fa.layer_norm_linear_fn(X, W, None, LW, LB.long(), is_rms_norm=True), TypeError,
        "linear_bias",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSALS))
def test_layer_norm_linear_fn_refusals_before_any_kernel(case):
    call, error, name = REFUSALS[case]
    with pytest.raises(error, match=re.escape(name)):
        call()
    assert rk.CALLS["forward"] == 0


def test_is_rms_norm_takes_any_true_value():
    """flash-attn passes ``is_rms_norm`` to its kernel as a flag: 1 works as True does."""
    assert torch.equal(
        fa.layer_norm_fn(X, W, None, is_rms_norm=1), fa.layer_norm_fn(X, W, None, is_rms_norm=True)
    )
    got = fa.layer_norm_linear_fn(X, W, None, LW, None, is_rms_norm=1)
    assert torch.equal(got, fa.layer_norm_linear_fn(X, W, None, LW, None, is_rms_norm=True))


def _inference_zeros(shape):
    with torch.inference_mode():
        return torch.zeros(shape)


@pytest.mark.parametrize(
    "which,make,rule",
    [
        ("residual_out", lambda s: torch.zeros(s, requires_grad=True), "must not be a leaf"),
        ("residual_out", _inference_zeros, "torch.inference_mode"),
        ("out", lambda s: torch.zeros(1, s[1]).expand(s), "must not repeat memory"),
    ],
    ids=["leaf-requiring-grad", "inference", "stride-0"],
)
def test_an_unwritable_buffer_is_refused_before_out_is_written(which, make, rule):
    """These failed in the copy into residual_out (or with PyTorch's generic overlap error),
    after y had already been written into out."""
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    out = torch.zeros(4, 64)
    buffers = {"out": out, "residual_out": torch.zeros(4, 64), which: make((4, 64))}
    with pytest.raises(rk.ContractValueError, match=f"^{which} {rule}|^{which} .*{rule}"):
        fa.rms_norm_fn(x, w, None, residual=r, prenorm=True, **buffers)
    assert not buffers["out"].any() and not out.any()  # nothing written

"""The peer-library drop-ins (``integrations.liger``, ``.apex``, ``.flash_attn``) against
float64 references of each library's own formula, written here as Liger's tests write theirs.

Each reference is PyTorch in float64; where the library rounds an intermediate (Llama's ``x * r``
to the input dtype, apex's to the output dtype) the reference rounds it too, straight-through
(the rounded value, the unrounded gradient). Tolerances are the campaign's
(``conf/campaign/default.yaml``), of the checked tensor's dtype (the loosest of the inputs' for
gradients of mixed dtypes). Also: dtypes of every output and gradient, the modules' attributes,
``state_dict`` keys and ``repr``, and every refused argument, named in its error, before any
kernel runs.
"""

from __future__ import annotations

import re
import warnings

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
    rms,
    st_round,
)

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations import apex, liger
from rmsnorm_kernel.integrations import flash_attn as fa


@pytest.fixture(autouse=True)
def _on_the_kernels_device():
    with torch.device(DEVICE):
        yield


LIGER_OFFSET = {"llama": 0.0, "gemma": 1.0, "none": 0.5}


@pytest.mark.parametrize("w_kind", ["float32", "x"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["llama", "gemma", "none"])
def test_liger_rms_norm_against_its_formula(mode, dtype, shape, w_kind):
    offset = LIGER_OFFSET[mode]
    w_dtype = F32 if w_kind == "float32" else dtype
    x, w = leaf(make_x(shape, dtype)), leaf(make_w(shape[-1], w_dtype, offset))
    y = liger.liger_rms_norm(x, w, EPS, offset=offset, casting_mode=mode)
    assert y.shape == x.shape and y.dtype == dtype  # Liger: Y is X's dtype, whatever W's
    dy = torch.randn(shape).to(dtype)
    dy_before = dy.clone()
    y.backward(dy)
    assert torch.equal(dy, dy_before)  # in_place=True does not overwrite the incoming gradient
    xd, wd = f64(x), f64(w)
    y_ref = liger_ref(xd, wd, offset, mode, dtype)
    y_ref.backward(dy.double())
    close(y, y_ref, dtype, "y")
    assert x.grad.dtype == dtype and w.grad.dtype == w_dtype
    close(x.grad, xd.grad, dtype, "dX")
    close(w.grad, wd.grad, loosest(dtype, w_dtype), "dW")


def test_liger_module_function_and_codes_agree():
    x = make_x((2, 3, 37), BF16)
    m = liger.LigerRMSNorm(37, eps=1e-5, offset=1.0, casting_mode="gemma", init_fn="zeros")
    with torch.no_grad():
        m.weight.normal_(0.0, 0.3)
    y = m(x)
    assert torch.equal(y, liger.liger_rms_norm(x, m.weight, 1e-5, 1.0, "gemma"))
    assert torch.equal(y, liger.LigerRMSNormFunction.apply(x, m.weight, 1e-5, 1.0, 1, False, 1))
    llama = liger.LigerRMSNormFunction.apply(x, m.weight, 1e-5, 1.0, 0)
    assert torch.equal(llama, liger.liger_rms_norm(x, m.weight, 1e-5, 1.0, "llama"))
    assert not torch.equal(llama, y)  # the two roundings are different functions
    close(y, liger_ref(x.double(), m.weight.double(), 1.0, "gemma", BF16), BF16, "module")


def test_liger_module_attributes_state_and_repr():
    m = liger.LigerRMSNorm(37)
    assert (m.variance_epsilon, m.offset, m.casting_mode, m.in_place, m.row_mode) == (
        1e-6,
        0.0,
        "llama",
        True,
        None,
    )
    assert m.elementwise_affine is True
    assert isinstance(m.weight, torch.nn.Parameter) and m.weight.dtype == F32
    assert torch.equal(m.weight, torch.ones(37))
    assert list(m.state_dict()) == ["weight"]
    assert repr(m) == (
        "LigerRMSNorm(weight_shape=(37,), eps=1e-06, offset=0.0, in_place=True, row_mode=None)"
    )
    z = liger.LigerRMSNorm(8, 1e-5, 1.0, "gemma", "zeros", False, True)
    assert torch.equal(z.weight, torch.zeros(8)) and (z.in_place, z.row_mode) == (False, True)
    bare = liger.LigerRMSNorm(8, offset=1.0, elementwise_affine=False)  # no weight: no offset
    assert bare.weight is None and list(bare.state_dict()) == []
    assert "weight_shape=None" in repr(bare)
    x = make_x((3, 8), F16)
    close(bare(x), liger_ref(x.double(), None, 0.0, "llama", F16), F16, "no weight")


def test_liger_float64_weight_beside_half_x():
    """Liger's llama mode multiplies the rounded x * r by a float64 (offset + W), stores X's."""
    x, w = leaf(make_x((3, 40), BF16)), leaf(make_w(40, torch.float64))
    y = liger.liger_rms_norm(x, w, EPS)
    assert y.dtype == BF16
    y.backward(torch.ones_like(y))
    xd, wd = f64(x), f64(w)
    liger_ref(xd, wd, 0.0, "llama", BF16).backward(torch.ones(3, 40, dtype=torch.float64))
    close(y, liger_ref(xd, wd, 0.0, "llama", BF16), BF16, "y")
    close(x.grad, xd.grad, BF16, "dX")
    assert w.grad.dtype == torch.float64


# ---------------------------------------------------------------------------------------------
# apex


def apex_ref(x, w, k, out_dtype):
    """apex's ``gamma * V(r * x)`` over the last ``k`` dims, in float64."""
    rows = x.flatten(x.dim() - k)
    n = (rows * rms(rows)).view(x.shape)
    n = st_round(n, out_dtype)
    return n if w is None else n * w


def _apex_case(fn, shape, k, x_dtype, w_dtype):
    normalized = shape[len(shape) - k :]
    x = leaf(make_x(shape, x_dtype))
    w = None if w_dtype is None else leaf(make_w(normalized, w_dtype))
    args = (x, normalized) if w is None else (x, w, normalized)
    y = fn(*args, EPS)
    out_dtype = x_dtype if w is None or fn is apex.fused_rms_norm_affine else w_dtype
    assert y.shape == x.shape and y.dtype == out_dtype
    dy = torch.randn(shape).to(out_dtype)
    y.backward(dy)
    xd = f64(x)
    wd = None if w is None else f64(w)
    y_ref = apex_ref(xd, wd, k, out_dtype)
    y_ref.backward(dy.double())
    close(y, y_ref, out_dtype, "y")
    assert x.grad.dtype == x_dtype
    close(x.grad, xd.grad, loosest(x_dtype, out_dtype), "dx")
    if w is not None:
        assert w.grad.dtype == w_dtype
        close(w.grad, wd.grad, loosest(x_dtype, w_dtype), "dweight")


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_apex_fused_rms_norm(dtype, k):
    _apex_case(apex.fused_rms_norm, (2, 3, 37), k, dtype, None)


@pytest.mark.parametrize("shape,k", [((4, 64), 1), ((2, 3, 37), 1), ((2, 3, 37), 2)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_apex_fused_rms_norm_affine(dtype, shape, k):
    _apex_case(apex.fused_rms_norm_affine, shape, k, dtype, dtype)


@pytest.mark.parametrize(
    "x_dtype,w_dtype",
    [(F32, F32), (BF16, BF16), (F16, F16), (F32, BF16), (F32, F16), (torch.float64, F32)],
    ids=str,
)
@pytest.mark.parametrize("shape,k", [((4, 64), 1), ((2, 3, 37), 2)], ids=str)
def test_apex_mixed_dtype_output_is_the_weights(x_dtype, w_dtype, shape, k):
    _apex_case(apex.mixed_dtype_fused_rms_norm_affine, shape, k, x_dtype, w_dtype)


def test_apex_modules_attributes_state_and_repr():
    m = apex.FusedRMSNorm(37)
    assert m.normalized_shape == torch.Size([37]) and isinstance(m.normalized_shape, torch.Size)
    assert (m.eps, m.elementwise_affine, m.memory_efficient) == (1e-5, True, False)
    assert isinstance(m.weight, torch.nn.Parameter) and m.weight.dtype == F32
    assert torch.equal(m.weight, torch.ones(37)) and list(m.state_dict()) == ["weight"]
    assert repr(m) == "FusedRMSNorm(torch.Size([37]), eps=1e-05, elementwise_affine=True)"
    with torch.no_grad():
        m.weight.mul_(3.0)
    m.reset_parameters()
    assert torch.equal(m.weight, torch.ones(37))
    two = apex.FusedRMSNorm([3, 37], eps=1e-6, elementwise_affine=False, memory_efficient=True)
    assert two.weight is None and list(two.state_dict()) == [] and two.memory_efficient
    x = make_x((2, 3, 37), BF16)
    close(two(x), apex_ref(x.double(), None, 2, BF16), BF16, "no weight, two dims")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mixed = apex.MixedFusedRMSNorm(37, 1e-6, elementwise_affine=True, extra="ignored")
    assert any("elementwise_affine" in str(w.message) for w in caught)
    assert isinstance(mixed, apex.FusedRMSNorm) and mixed.elementwise_affine
    assert repr(mixed) == "MixedFusedRMSNorm(torch.Size([37]), eps=1e-06, elementwise_affine=True)"
    mixed = mixed.to(BF16)  # Megatron's setting: 16-bit weights, a float32 residual stream in
    x32 = make_x((4, 37), F32)
    y = mixed(x32)
    assert y.dtype == BF16
    close(y, apex_ref(x32.double(), mixed.weight.double(), 1, BF16), BF16, "mixed module")
    module = apex.FusedRMSNorm(37, eps=1e-6).to(BF16)
    assert torch.equal(
        module(x32.to(BF16)), apex.fused_rms_norm_affine(x32.to(BF16), module.weight, (37,), 1e-6)
    )


def test_apex_casts_only_under_cuda_autocast():
    """apex's ``_cast_if_autocast_enabled`` looks at CUDA autocast only: CPU autocast leaves the
    float32 inputs (and so the float32 output) as they are."""
    x, w = make_x((3, 37), F32), make_w(37, F32)
    with torch.autocast("cpu", dtype=BF16):
        y = apex.fused_rms_norm_affine(x, w, 37)
    assert y.dtype == F32
    close(y, apex_ref(x.double(), w.double(), 1, F32), F32, "y")


@pytest.mark.gpu
def test_apex_casts_to_the_cuda_autocast_dtype():
    """Under CUDA autocast apex casts input and weight to the autocast dtype first: float32
    inputs give a bfloat16 output, apex's formula on the cast values."""
    x, w = make_x((3, 37), F32), make_w(37, F32)
    with torch.autocast("cuda", dtype=BF16):
        y = apex.fused_rms_norm_affine(x, w, 37)
    assert y.dtype == BF16
    close(y, apex_ref(x.to(BF16).double(), w.to(BF16).double(), 1, BF16), BF16, "y")


# ---------------------------------------------------------------------------------------------
# flash-attention


def flash_ref(x, w, residual, zero_centered):
    """flash-attn's kernel formula in float64: ``h = x + residual``, ``y = h * r * w``."""
    h = x if residual is None else x + residual
    return h * rms(h) * (w + 1.0 if zero_centered else w), h


@pytest.mark.parametrize("residual_kind", ["none", "none_in_fp32", "same", "float32"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flash_rms_norm_fn_against_its_formula(dtype, shape, residual_kind):
    zero_centered = len(shape) == 3
    x = leaf(make_x(shape, dtype))
    w = leaf(make_w(shape[-1], F32, 1.0 if zero_centered else 0.0))
    residual = {"same": dtype, "float32": F32}.get(residual_kind)
    r = None if residual is None else leaf(make_x(shape, residual, 0.5))
    in_fp32 = residual_kind in ("none_in_fp32", "float32")
    y, res = fa.rms_norm_fn(
        x,
        w,
        None,
        residual=r,
        eps=EPS,
        prenorm=True,
        residual_in_fp32=in_fp32,
        zero_centered_weight=zero_centered,
    )
    res_dtype = residual if residual is not None else (F32 if in_fp32 else dtype)
    assert y.dtype == dtype and y.shape == x.shape  # y in x's dtype, also beside a float32 residual
    assert res.dtype == res_dtype and res.shape == x.shape
    if residual is None:
        assert torch.equal(res, x.to(res_dtype))  # x itself (converted with residual_in_fp32)
    dy, dres = torch.randn(shape).to(dtype), torch.randn(shape).to(res_dtype)
    torch.autograd.backward([y, res], [dy, dres])
    xd, wd = f64(x), f64(w)
    rd = None if r is None else f64(r)
    y_ref, h_ref = flash_ref(xd, wd, rd, zero_centered)
    torch.autograd.backward([y_ref, h_ref], [dy.double(), dres.double()])
    close(y, y_ref, dtype, "y")
    close(res, h_ref, res_dtype, "residual_out")
    close(x.grad, xd.grad, loosest(dtype, res_dtype), "dx")
    close(w.grad, wd.grad, dtype, "dweight")
    if r is not None:
        assert r.grad.dtype == residual
        close(r.grad, rd.grad, loosest(dtype, res_dtype), "dresidual")
    plain = fa.rms_norm_fn(x, w, None, r, eps=EPS, zero_centered_weight=zero_centered)
    assert isinstance(plain, torch.Tensor) and torch.equal(plain, y)  # no prenorm: y alone


@pytest.mark.parametrize("x_dtype,out_dtype", [(BF16, F32), (F32, BF16), (F16, BF16)], ids=str)
def test_flash_out_dtype_is_one_rounding_of_float32(x_dtype, out_dtype):
    """``out_dtype`` float32 beside a bfloat16 x holds float32 accuracy (no 16-bit detour)."""
    x, w = leaf(make_x((4, 37), x_dtype)), leaf(make_w(37, F32))
    r = make_x((4, 37), x_dtype, 0.5)
    for residual in (None, r):
        y = fa.rms_norm_fn(x, w, None, residual, eps=EPS, out_dtype=out_dtype)
        assert y.dtype == out_dtype
        y_ref, _ = flash_ref(x.double(), w.double(), None if residual is None else r.double(), 0)
        close(y, y_ref, out_dtype, f"y (residual: {residual is not None})")


def test_flash_out_buffers_and_dropout_masks():
    x, w, r = make_x((2, 3, 37), BF16), make_w(37, F32), make_x((2, 3, 37), BF16)
    y, res = fa.rms_norm_fn(x, w, None, r, eps=EPS, prenorm=True)
    out = torch.full_like(x, 7.0)
    res_out = torch.full_like(x, 7.0, dtype=F32)
    got = fa.rms_norm_fn(x, w, None, r, eps=EPS, prenorm=True, out=out, residual_out=res_out)
    assert got[0] is out and got[1] is res_out
    # A float32 residual_out: h is kept in float32, and y normalises that (flash-attn's kernel)
    assert torch.equal(out, fa.rms_norm_fn(x, w, None, r.float(), eps=EPS))
    close(out, flash_ref(x.double(), w.double(), r.double(), False)[0], BF16, "out")
    close(res_out, x.double() + r.double(), F32, "residual_out in float32")
    masks = fa.rms_norm_fn(x, w, None, r, eps=EPS, return_dropout_mask=True)
    assert len(masks) == 3 and torch.equal(masks[0], y) and masks[1:] == (None, None)
    masks = fa.rms_norm_fn(x, w, None, r, eps=EPS, prenorm=True, return_dropout_mask=True)
    assert len(masks) == 4 and torch.equal(masks[1], res) and masks[2:] == (None, None)


def test_flash_module_attributes_state_and_forward():
    m = fa.RMSNorm(37)
    assert (m.eps, m.drop, m.zero_centered_weight, m.bias) == (1e-5, None, False, None)
    assert torch.equal(m.weight, torch.ones(37)) and list(m.state_dict()) == ["weight"]
    assert repr(m) == "RMSNorm()"
    z = fa.RMSNorm(37, eps=1e-6, zero_centered_weight=True, dtype=BF16)
    assert z.weight.dtype == BF16 and torch.equal(z.weight, torch.zeros(37, dtype=BF16))
    with torch.no_grad():
        z.weight.normal_(0.0, 0.3)
    x, r = make_x((2, 3, 37), BF16), make_x((2, 3, 37), F32)
    y, res = z(x, residual=r, prenorm=True)
    ref_y, ref_res = fa.rms_norm_fn(
        x, z.weight, None, r, eps=1e-6, prenorm=True, zero_centered_weight=True
    )
    assert torch.equal(y, ref_y) and torch.equal(res, ref_res) and res.dtype == F32
    y_ref, _ = flash_ref(x.double(), z.weight.double(), r.double(), True)
    close(y, y_ref, BF16, "module y")
    y1, res1 = z(x, prenorm=True, residual_in_fp32=True)
    assert res1.dtype == F32 and torch.equal(res1, x.float())
    d = fa.RMSNorm(37, dropout_p=0.1)
    assert isinstance(d.drop, torch.nn.Dropout) and d.drop.p == 0.1
    assert repr(d) == "RMSNorm(\n  (drop): Dropout(p=0.1, inplace=False)\n)"
    d.eval()  # no dropout in eval mode, as flash-attn
    close(d(x), flash_ref(x.double(), d.weight.double(), None, False)[0], BF16, "eval")
    d.train()
    with pytest.raises(NotImplementedError, match="dropout_p"):
        d(x)


# ---------------------------------------------------------------------------------------------
# Which rounding: the tolerances above cannot tell one 16-bit rounding from two; bits can.

MIN_EXACT = 0.99  # elements equal to the formula computed by PyTorch in the same dtypes


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_each_entry_point_rounds_as_its_library(dtype):
    """Llama's two roundings (Liger "llama", apex) against one (Liger "gemma", flash-attn): each
    entry point's output equals its own library's formula computed in PyTorch (>= 99% of
    elements, for rsqrt's last bit), and the two formulas differ in many elements, so a swap of
    rules fails here."""
    x = make_x((64, 64), dtype, 3.0)
    w, w32 = make_w(64, dtype), make_w(64, F32)
    n = x.float() * rms(x.float())  # float32, as all three compute r * x

    def exact(a, b):
        assert a.dtype == b.dtype
        return (a == b).float().mean().item()

    two = (w.float() * n.to(dtype).float()).to(dtype)  # V(w * V(r * x))
    two32 = (w32 * n.to(dtype).float()).to(dtype)  # Liger llama, float32 W: stored as X's dtype
    one = (n * (1.0 + w.float())).to(dtype)  # Liger gemma, offset 1
    one32 = (n * w32).to(dtype)  # flash-attn
    assert exact(two, (n * w.float()).to(dtype)) < 0.9  # the rules are distinguishable
    assert exact(liger.liger_rms_norm(x, w, EPS), two) >= MIN_EXACT
    assert exact(liger.liger_rms_norm(x, w32, EPS), two32) >= MIN_EXACT
    assert exact(liger.liger_rms_norm(x, w, EPS, 1.0, "gemma"), one) >= MIN_EXACT
    assert exact(apex.fused_rms_norm_affine(x, w, 64, EPS), two) >= MIN_EXACT
    assert exact(fa.rms_norm_fn(x, w32, None, eps=EPS), one32) >= MIN_EXACT
    x32 = x.float()  # apex mixed: a float32 input, the output in the 16-bit weight's dtype
    mixed = apex.mixed_dtype_fused_rms_norm_affine(x32, w, 64, EPS)
    assert exact(mixed, n.to(dtype) * w) >= MIN_EXACT


# ---------------------------------------------------------------------------------------------
# Refusals: each names its argument, and no kernel has run.

with torch.device(DEVICE):
    X8 = make_x((3, 8), BF16)
    W8 = torch.ones(8, dtype=BF16)
    W8_F32 = torch.ones(8)
    OUT8 = torch.empty(3, 8, dtype=BF16)
    BIG8 = torch.empty(4, 8, dtype=BF16)

REFUSALS = {
    "liger casting_mode": (
        lambda: liger.liger_rms_norm(X8, W8, EPS, casting_mode="fp32"), ValueError, "casting_mode"
    ),
    "liger casting_mode bool": (
        lambda: liger.LigerRMSNormFunction.apply(X8, W8, EPS, 0.0, True), ValueError,
        "casting_mode",
    ),
    "liger module casting_mode": (
        lambda: liger.LigerRMSNorm(8, casting_mode="bf16"), ValueError, "casting_mode"
    ),
    "liger init_fn": (lambda: liger.LigerRMSNorm(8, init_fn="normal"), ValueError, "init_fn"),
    "liger eps None": (lambda: liger.liger_rms_norm(X8, W8, None), TypeError, "eps"),
    "liger offset inf": (
        lambda: liger.liger_rms_norm(X8, W8, EPS, offset=float("inf")), ValueError, "offset"
    ),
    "liger W shape": (lambda: liger.liger_rms_norm(X8, W8[:5], EPS), ValueError, "W"),
    "liger X": (lambda: liger.liger_rms_norm([1.0], W8, EPS), TypeError, "X"),
    "apex weight dtype": (
        lambda: apex.fused_rms_norm_affine(X8, W8_F32, 8), TypeError, "weight"
    ),
    "apex module weight dtype": (lambda: apex.FusedRMSNorm(8)(X8), TypeError, "weight"),
    "apex mixed pair": (
        lambda: apex.mixed_dtype_fused_rms_norm_affine(X8, W8_F32, 8), TypeError, "weight dtype"
    ),
    "apex normalized_shape": (
        lambda: apex.fused_rms_norm(X8, (4, 8)), ValueError, "normalized_shape"
    ),
    "apex normalized_shape empty": (
        lambda: apex.fused_rms_norm(X8, ()), ValueError, "normalized_shape"
    ),
    "apex weight shape": (
        lambda: apex.fused_rms_norm_affine(X8, W8[:7], 8), ValueError, "weight"
    ),
    "apex memory_efficient": (
        lambda: apex.fused_rms_norm(X8, 8, memory_efficient="yes"), TypeError,
        "memory_efficient",
    ),
    "apex eps": (lambda: apex.fused_rms_norm(X8, 8, eps=None), TypeError, "eps"),
    "apex mixed elementwise_affine": (
        lambda: apex.MixedFusedRMSNorm(8, elementwise_affine=False), RuntimeError,
        "elementwise_affine",
    ),
    "flash bias": (lambda: fa.rms_norm_fn(X8, W8, W8), NotImplementedError, "bias"),
    "flash x1": (lambda: fa.rms_norm_fn(X8, W8, None, x1=X8), NotImplementedError, "x1"),
    "flash weight1": (
        lambda: fa.rms_norm_fn(X8, W8, None, weight1=W8), NotImplementedError, "weight1"
    ),
    "flash bias1": (lambda: fa.rms_norm_fn(X8, W8, None, bias1=W8), NotImplementedError, "bias1"),
    "flash rowscale": (
        lambda: fa.rms_norm_fn(X8, W8, None, rowscale=torch.ones(3)), NotImplementedError,
        "rowscale",
    ),
    "flash dropout_p": (
        lambda: fa.rms_norm_fn(X8, W8, None, dropout_p=0.1), NotImplementedError, "dropout_p"
    ),
    "flash dropout_p negative": (
        lambda: fa.rms_norm_fn(X8, W8, None, dropout_p=-0.1), ValueError, "dropout_p"
    ),
    "flash out_dtype": (
        lambda: fa.rms_norm_fn(X8, W8, None, out_dtype=torch.int32), TypeError, "out_dtype"
    ),
    "flash out shape": (
        lambda: fa.rms_norm_fn(X8, W8, None, out=torch.empty(3, 7)), ValueError, "out"
    ),
    "flash out and out_dtype": (
        lambda: fa.rms_norm_fn(X8, W8, None, out_dtype=F32, out=torch.empty_like(X8)),
        ValueError, "out_dtype",
    ),
    "flash residual_out shape": (
        lambda: fa.rms_norm_fn(X8, W8, None, X8, residual_out=torch.empty(8)), ValueError,
        "residual_out",
    ),
    "flash weight None": (lambda: fa.rms_norm_fn(X8, None, None), TypeError, "weight"),
    "flash eps": (lambda: fa.rms_norm_fn(X8, W8, None, eps=float("nan")), ValueError, "eps"),
    "flash layer_norm_fn LayerNorm": (
        lambda: fa.layer_norm_fn(X8, W8, None), NotImplementedError, "is_rms_norm must be True"
    ),
    "flash out is residual_out": (
        lambda: fa.rms_norm_fn(X8, W8, None, X8, prenorm=True, out=OUT8, residual_out=OUT8),
        ValueError, "out and residual_out must not share memory",
    ),
    "flash out overlaps residual_out": (
        lambda: fa.rms_norm_fn(
            X8, W8, None, X8, prenorm=True, out=BIG8[:3], residual_out=BIG8[1:]
        ),
        ValueError, "must not share memory",
    ),
    "flash out is x, x returned": (
        lambda: fa.rms_norm_fn(X8, W8, None, prenorm=True, out=X8), ValueError,
        "out must not share memory with x",
    ),
}  # fmt: skip


@pytest.mark.filterwarnings("ignore:MixedFusedRMSNorm does not support")
@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_name_the_argument_before_any_kernel(case):
    call, error, name = REFUSALS[case]
    x_before = X8.clone()
    with pytest.raises(error, match=re.escape(name)):
        call()
    assert rk.CALLS["forward"] == 0, "a kernel ran before the refusal"
    assert torch.equal(X8, x_before)


def test_a_refused_call_leaves_the_out_buffer_untouched():
    out = torch.full_like(X8, 7.0)
    with pytest.raises(NotImplementedError, match="bias"):
        fa.rms_norm_fn(X8, W8, W8, out=out)
    assert torch.equal(out, torch.full_like(X8, 7.0)) and rk.CALLS["forward"] == 0


def test_flash_layer_norm_fn_with_is_rms_norm_is_rms_norm_fn():
    """flash-attn's ``layer_norm_fn(..., is_rms_norm=True)`` is its ``rms_norm_fn``: the same
    outputs for the same arguments (a residual, prenorm, the float32 residual stream)."""
    x, w, res = make_x((3, 37), BF16), make_w(37, BF16), make_x((3, 37), BF16)
    kwargs = dict(residual=res, prenorm=True, residual_in_fp32=True, eps=1e-5)
    got = fa.layer_norm_fn(x, w, None, is_rms_norm=True, **kwargs)
    want = fa.rms_norm_fn(x, w, None, **kwargs)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)

"""Property tests: ``rmsnorm`` against the float64 oracle on drawn inputs, and refusals first.

Drawn: leading dims (0-3 of them, sizes 0-5), N, dtype, weight dtype or no weight, eps (or None),
Gemma offset, residual (with or without a gradient of the returned sum), layout (contiguous, row
strided view, transposed = copied), input scale. Every output and gradient is checked element by
element against the float64 oracle with the campaign's tolerances (``kernel_helpers``).

Profiles (``HYPOTHESIS_PROFILE``):
- ``ci`` (default): sized for Triton's interpreter on 2 cores -- 4 dtypes x 6 weight kinds x 17
  = 408 valid examples (N <= 1100, at most 24 rows) and 100 invalid ones, derandomised so CI is
  reproducible (~30 s here).
- ``gpu``: CUDA only -- 24 x 84 = 2016 valid examples (N up to 70000: every kernel path) and 500
  invalid ones. Run: ``HYPOTHESIS_PROFILE=gpu python -m pytest -n 8 tests/kernel/test_fuzz.py``.
"""

from __future__ import annotations

import math
import os
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kernel_helpers import assert_close, loosest, oracle, x_away_from_zero

import rmsnorm_kernel as rk
from rmsnorm_kernel import ops
from rmsnorm_kernel.function import default_eps

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in ("ci", "gpu"):
    raise RuntimeError(f"HYPOTHESIS_PROFILE must be 'ci' or 'gpu' (got {PROFILE!r})")
if PROFILE == "gpu" and rk.BACKEND != "cuda":
    raise RuntimeError("HYPOTHESIS_PROFILE=gpu runs the compiled kernels: it needs CUDA")

_COMMON = dict(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
#: The gpu profile does not shrink (test_config_fuzz.PHASES: each new shape class compiles), so a
#: failure cannot hold the GPU suite for minutes; the failing example is reported whole.
_GPU = dict(_COMMON, phases=tuple(p for p in Phase if p != Phase.shrink))
VALID = {  # per (dtype, weight kind): 24 tests
    "ci": settings(max_examples=17, derandomize=True, **_COMMON),
    "gpu": settings(max_examples=84, **_GPU),
}[PROFILE]
INVALID = {  # per (dtype, weight kind): 24 tests
    "ci": settings(max_examples=17, derandomize=True, **_COMMON),
    "gpu": settings(max_examples=84, **_COMMON),
}[PROFILE]
#: Widest N and most rows drawn: the interpreter is slow; the GPU reaches every kernel path
#: (several rows per program <= 1024 < one pass <= 65536 < chunks; backward tiles > 16384).
MAX_N = {"ci": 1100, "gpu": 70000}[PROFILE]
MAX_ROWS = {"ci": 24, "gpu": 300}[PROFILE]
SPECIAL_N = [
    n for n in (1, 2, 16, 255, 256, 257, 1024, 1025, 4096, 16385, 65536, 65537) if n <= MAX_N
]
DEVICE = "cuda" if rk.BACKEND == "cuda" else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
#: Weight: none, x's dtype, or any of the four (mixed dtypes). One test per (dtype, weight kind),
#: so that pytest-xdist spreads the GPU profile's compilations over its workers.
W_KINDS = ["none", "same", *DTYPES]


@st.composite
def valid_cases(draw, dtype, w_kind=None):
    # zero-size leading dims (M = 0) stay possible but rare: most examples carry rows
    lead = draw(st.lists(st.sampled_from([1, 2, 3, 4, 5, 7, 2, 3, 0]), max_size=3))
    n = draw(st.one_of(st.integers(1, 300), st.integers(1, MAX_N), st.sampled_from(SPECIAL_N)))
    rows = math.prod(lead)
    if rows > MAX_ROWS or rows * n > MAX_ROWS * MAX_N // 8:
        lead = [min(rows, MAX_ROWS, max(1, MAX_ROWS * MAX_N // 8 // n))]
    if w_kind is None:
        w_kind = draw(st.sampled_from(W_KINDS))
    w_dtype = None if w_kind == "none" else (dtype if w_kind == "same" else w_kind)
    offset = 0.0
    if w_dtype is not None:
        offset = draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(-2.0, 2.0)))
    eps = draw(st.one_of(st.sampled_from([1e-6, 1e-5, None]), st.floats(1e-10, 1.0)))
    residual = draw(st.booleans())
    return dict(
        lead=lead,
        n=n,
        dtype=dtype,
        w_dtype=w_dtype,
        offset=offset,
        eps=eps,
        residual=residual,
        use_dh=residual and draw(st.booleans()),
        layout=draw(st.sampled_from(["contiguous", "row_strided", "transposed"])),
        pad=draw(st.integers(1, 17)),
        # x is drawn with |x| >= scale / 4: kernel_helpers.x_away_from_zero says why.
        scale=draw(st.sampled_from([0.5, 1.0, 100.0])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def _randn(gen, *shape, dtype, scale=1.0):
    return (scale * torch.randn(*shape, generator=gen)).to(device=DEVICE, dtype=dtype)


def _x_values(gen, *shape, dtype, scale):
    return x_away_from_zero(gen, *shape, scale=scale).to(device=DEVICE, dtype=dtype)


def _make_x(case, gen):
    lead, n, dtype = case["lead"], case["n"], case["dtype"]
    if case["layout"] == "row_strided":  # a view: unit column stride, row stride n + pad
        base = _x_values(gen, *lead, n + case["pad"], dtype=dtype, scale=case["scale"])
        start = case["pad"] // 2
        return base[..., start : start + n]
    if case["layout"] == "transposed":  # last dim strided: copied once
        return _x_values(gen, n, *lead, dtype=dtype, scale=case["scale"]).movedim(0, -1)
    return _x_values(gen, *lead, n, dtype=dtype, scale=case["scale"])


@pytest.mark.parametrize("w_kind", W_KINDS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_oracle(dtype, w_kind):
    @VALID
    @given(case=valid_cases(dtype, w_kind))
    def check(case):
        gen = torch.Generator().manual_seed(case["seed"])
        x = _make_x(case, gen).requires_grad_()
        n = case["n"]
        w = None
        if case["w_dtype"] is not None:
            w = (1 + 0.5 * torch.randn(n, generator=gen)).to(DEVICE, case["w_dtype"])
            w.requires_grad_()
        r = None
        if case["residual"]:
            r = _randn(gen, *x.shape, dtype=dtype).requires_grad_()
        out = rk.rmsnorm(x, w, case["eps"], offset=case["offset"], residual=r)
        y, h = out if r is not None else (out, None)
        dy = _randn(gen, *y.shape, dtype=dtype)
        dh = _randn(gen, *y.shape, dtype=dtype) if case["use_dh"] else None
        torch.autograd.backward(
            [y, h] if dh is not None else [y], [dy, dh] if dh is not None else [dy]
        )
        eps = default_eps(dtype) if case["eps"] is None else case["eps"]
        y_ref, _, dx_ref, dw_ref, dr_ref = oracle(
            x, w, dy, eps, offset=case["offset"], residual=r, dh=dh, h_rounded=h
        )
        tol = loosest(dtype, case["w_dtype"] or dtype)
        assert y.dtype == dtype and y.shape == x.shape
        assert_close(y, y_ref, tol, "y")
        assert_close(x.grad, dx_ref, tol, "dx")
        if r is not None:
            assert_close(h, x.detach().double() + r.detach().double(), tol, "x + residual")
            assert torch.equal(h, x.detach() + r.detach())  # bitwise: one rounding to nearest
            assert_close(r.grad, dr_ref, tol, "dresidual")
        if w is not None:
            assert w.grad.dtype == w.dtype
            assert_close(w.grad, dw_ref, tol, "dweight")

    check()


def _boom(*args, **kwargs):
    raise AssertionError("a kernel launcher ran before the contract refused the input")


#: (mutation, expected error class, message fragment): each breaks exactly one rule.
MUTATIONS = [
    ("weight_length", ValueError, "weight must have shape (N,)"),
    ("weight_2d", ValueError, "weight must have shape (N,)"),
    ("weight_int", TypeError, "weight must have dtype"),
    ("weight_list", TypeError, "weight must be a torch.Tensor"),
    ("residual_shape", ValueError, "residual must have x's shape"),
    ("residual_dtype", TypeError, "residual must have x's dtype"),
    ("eps_nonpositive", ValueError, "eps must be > 0"),
    ("eps_nonfinite", ValueError, "eps must be finite"),
    ("eps_huge", ValueError, "eps must fit in float32"),
    ("eps_bool", TypeError, "eps must be a real number"),
    ("offset_nan", ValueError, "offset must be finite"),
    ("offset_without_weight", ValueError, "offset requires a weight"),
    ("x_int", TypeError, "x must have dtype"),
    ("x_zero_width", ValueError, "1 <= N"),
]


@given(
    case=valid_cases(torch.float32),
    dtype=st.sampled_from(DTYPES),
    mutation=st.sampled_from(MUTATIONS),
    bad_eps=st.sampled_from([0.0, -1e-6, -1.0]),
    bad_float=st.sampled_from([math.nan, math.inf, -math.inf]),
)
@INVALID
def test_invalid_inputs_refused_before_any_output(case, dtype, mutation, bad_eps, bad_float):
    name, error, fragment = mutation
    gen = torch.Generator().manual_seed(case["seed"])
    case["dtype"] = dtype
    x = _make_x(case, gen)
    n = case["n"]
    w = torch.ones(n, device=DEVICE, dtype=dtype)
    r, eps, offset = None, 1e-6, 0.0
    if name == "weight_length":
        w = torch.ones(n + 1 + case["pad"], device=DEVICE, dtype=dtype)
    elif name == "weight_2d":
        w = torch.ones(1, n, device=DEVICE, dtype=dtype)
    elif name == "weight_int":
        w = torch.ones(n, device=DEVICE, dtype=torch.int32)
    elif name == "weight_list":
        w = [1.0] * n
    elif name == "residual_shape":
        r = torch.zeros(*x.shape[:-1], n + 1, device=DEVICE, dtype=dtype)
    elif name == "residual_dtype":
        other = torch.float64 if dtype != torch.float64 else torch.float32
        r = torch.zeros(x.shape, device=DEVICE, dtype=other)
    elif name == "eps_nonpositive":
        eps = bad_eps
    elif name == "eps_nonfinite":
        eps = bad_float
    elif name == "eps_huge":
        eps = 1e39
    elif name == "eps_bool":
        eps = True
    elif name == "offset_nan":
        offset = math.nan
    elif name == "offset_without_weight":
        w, offset = None, 1.0
    elif name == "x_int":
        x = torch.ones(*x.shape, device=DEVICE, dtype=torch.int64)
    elif name == "x_zero_width":
        x = x[..., :0]
    rk.reset_calls()
    with (
        mock.patch.object(ops, "launch_forward", _boom),
        mock.patch.object(ops, "launch_backward", _boom),
        pytest.raises(error) as info,
    ):
        rk.rmsnorm(x, w, eps, offset=offset, residual=r)
    assert fragment in str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert rk.CALLS == {"forward": 0, "backward": 0}

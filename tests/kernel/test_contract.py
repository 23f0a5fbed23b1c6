"""Every refusal raises a clear error before any output exists (no launch, no allocation)."""

from __future__ import annotations

import math

import pytest
import torch

import rmsnorm_kernel as rk
from rmsnorm_kernel import ops


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if a launcher runs: the contract must refuse first."""

    def boom(*args, **kwargs):
        raise AssertionError("a kernel launcher ran before the contract refused the input")

    monkeypatch.setattr(ops, "launch_forward", boom)
    monkeypatch.setattr(ops, "launch_backward", boom)


def _x(device, *shape, dtype=torch.float32):
    return torch.randn(*shape, device=device, dtype=dtype)


CASES = [
    # (name, builder(device) -> kwargs, error type, message fragment)
    ("x not a tensor", lambda d: dict(x=[[1.0, 2.0]]), TypeError, "x must be a torch.Tensor"),
    (
        "int dtype",
        lambda d: dict(x=torch.ones(2, 4, dtype=torch.int32, device=d)),
        TypeError,
        "x must have dtype",
    ),
    ("0-dim x", lambda d: dict(x=torch.tensor(1.0, device=d)), ValueError, "at least 1 dim"),
    ("N = 0", lambda d: dict(x=_x(d, 3, 0)), ValueError, "1 <= N"),
    (
        "N too large",
        lambda d: dict(x=torch.empty(1, rk.MAX_N + 1, device=d)),
        ValueError,
        f"<= {rk.MAX_N}",
    ),
    (
        "weight wrong shape",
        lambda d: dict(x=_x(d, 2, 8), weight=_x(d, 7)),
        ValueError,
        "weight must have shape (N,) = (8,) (got (7,))",
    ),
    (
        "weight 2-D",
        lambda d: dict(x=_x(d, 2, 8), weight=_x(d, 1, 8)),
        ValueError,
        "weight must have shape",
    ),
    (
        "weight int",
        lambda d: dict(x=_x(d, 2, 8), weight=torch.ones(8, dtype=torch.int64, device=d)),
        TypeError,
        "weight must have dtype",
    ),
    (
        "weight not tensor",
        lambda d: dict(x=_x(d, 2, 8), weight=[1.0] * 8),
        TypeError,
        "weight must be a torch.Tensor",
    ),
    ("eps bool", lambda d: dict(x=_x(d, 2, 8), eps=True), TypeError, "eps must be a real number"),
    ("eps string", lambda d: dict(x=_x(d, 2, 8), eps="1e-6"), TypeError, "eps must be a real"),
    ("eps zero", lambda d: dict(x=_x(d, 2, 8), eps=0.0), ValueError, "eps must be > 0"),
    ("eps negative", lambda d: dict(x=_x(d, 2, 8), eps=-1e-6), ValueError, "eps must be > 0"),
    # > 0, yet 0 (1e-50) or subnormal (1e-39) in the kernels' float32: a zero row would be NaN
    ("eps 0 in float32", lambda d: dict(x=_x(d, 2, 8), eps=1e-50), ValueError, "smallest normal"),
    ("eps subnormal", lambda d: dict(x=_x(d, 2, 8), eps=1e-39), ValueError, "smallest normal"),
    ("eps nan", lambda d: dict(x=_x(d, 2, 8), eps=math.nan), ValueError, "eps must be finite"),
    ("eps inf", lambda d: dict(x=_x(d, 2, 8), eps=math.inf), ValueError, "eps must be finite"),
    (
        "offset nan",
        lambda d: dict(x=_x(d, 2, 8), weight=_x(d, 8), offset=math.nan),
        ValueError,
        "offset must be finite",
    ),
    (
        "offset without weight",
        lambda d: dict(x=_x(d, 2, 8), offset=1.0),
        ValueError,
        "offset requires a weight",
    ),
    (
        "residual shape",
        lambda d: dict(x=_x(d, 2, 8), residual=_x(d, 3, 8)),
        ValueError,
        "residual must have x's shape",
    ),
    (
        "residual dtype",
        lambda d: dict(x=_x(d, 2, 8), residual=_x(d, 2, 8, dtype=torch.float64)),
        TypeError,
        "residual must have x's dtype",
    ),
    # sparse and mkldnn layouts used to pass the checks and fail inside the launch, unnamed
    ("x sparse", lambda d: dict(x=_x(d, 2, 8).to_sparse()), TypeError, "x must be a dense"),
    ("x csr", lambda d: dict(x=_x(d, 2, 8).to_sparse_csr()), TypeError, "layout torch.sparse_csr"),
    (
        "weight sparse",
        lambda d: dict(x=_x(d, 2, 8), weight=_x(d, 8).to_sparse()),
        TypeError,
        "weight must be a dense (strided) tensor (got layout torch.sparse_coo)",
    ),
    (
        "residual sparse",
        lambda d: dict(x=_x(d, 2, 8), residual=_x(d, 2, 8).to_sparse()),
        TypeError,
        "residual must be a dense",
    ),
]
if torch.backends.mkldnn.is_available():
    CASES.append(
        ("x mkldnn", lambda d: dict(x=_x("cpu", 2, 8).to_mkldnn()), TypeError, "x must be a dense")
    )


@pytest.mark.parametrize("name,build,error,fragment", CASES, ids=[c[0] for c in CASES])
def test_refusals(name, build, error, fragment, device, no_launch):
    kwargs = build(device)
    x = kwargs.pop("x")
    weight = kwargs.pop("weight", None)
    eps = kwargs.pop("eps", 1e-6)
    with pytest.raises(error, match=None) as info:
        rk.rmsnorm(x, weight, eps, **kwargs)
    assert fragment in str(info.value)
    assert isinstance(info.value, RuntimeError), "PyTorch's RMSNorm raises RuntimeError too"
    assert rk.CALLS == {"forward": 0, "backward": 0}


def test_weight_on_other_device_is_refused(no_launch):
    if not torch.cuda.is_available():
        pytest.skip("needs two devices")
    with pytest.raises(ValueError, match="weight must be on x's device"):
        rk.rmsnorm(torch.randn(2, 8, device="cuda"), torch.ones(8), 1e-6)


def test_forward_op_checks_contract(device, no_launch):
    with pytest.raises(ValueError, match="eps must be > 0"):
        rk.forward_op(_x(device, 2, 8), None, 0.0)


def test_backward_op_checks_dy_shape(device):
    x = _x(device, 2, 8)
    y, rstd = rk.forward_op(x, None, 1e-6)
    with pytest.raises(ValueError, match="dy must match x's shape"):
        rk.backward_op(_x(device, 2, 7), x, None, rstd)


def test_module_checks_normalized_shape(device):
    norm = rk.RMSNorm(8, device=device)
    with pytest.raises(ValueError, match="normalized_shape"):
        norm(_x(device, 2, 7))


def test_the_fast_path_accepts_only_what_the_full_checks_accept(monkeypatch, device):
    """``check_contract`` returns early for the common valid call (host time); every call it
    lets through that way must pass the full checks too, and the common Llama and fused-residual
    calls must take it. On the kernels' device: the fast path takes nothing elsewhere."""
    from rmsnorm_kernel import contract

    n = 8
    xs = [
        torch.randn(2, n, dtype=d, device=device)
        for d in (torch.float16, torch.float32, torch.float64)
    ]
    weights = [None, [1.0] * n, torch.ones(n + 1, device=device)]
    weights += [
        torch.ones(n, dtype=d, device=device)
        for d in (torch.bfloat16, torch.float32, torch.float64)
    ]
    taken = set()
    for x in xs:
        residuals = [None, torch.randn_like(x), torch.randn(2, n + 1, dtype=x.dtype, device=device)]
        other = torch.float32 if x.dtype != torch.float32 else torch.float64
        residuals.append(torch.randn(2, n, dtype=other, device=device))
        for w in weights:
            for r in residuals:
                for rounding in ("torch", "llama", "other"):
                    for offset in (0.0, 1.0):
                        # check_contract consults the fast path for the two roundings only.
                        fast = rounding in ("torch", "llama") and contract._common_case_ok(
                            x, w, 1e-6, offset, r, rounding
                        )
                        if not fast:
                            continue
                        taken.add((x.dtype, None if w is None else str(w.dtype), rounding))
                        with monkeypatch.context() as m:
                            m.setattr(contract, "_common_case_ok", lambda *a: False)
                            contract.check_contract(
                                x, w, 1e-6, offset=offset, residual=r, rounding=rounding
                            )
    assert (torch.float16, "torch.float32", "llama") in taken
    assert (torch.float64, "torch.float64", "llama") in taken
    assert (torch.float16, "torch.float64", "llama") not in taken  # refused by the full checks


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_eps_none_with_a_non_float_input_names_x_dtype(device, dtype):
    """eps=None resolves through x's dtype (default_eps); a non-float x must get the contract's
    message about x, not finfo's TypeError, under the entry's own argument name (the drop-ins
    take F.rms_norm's ``input``)."""
    x = torch.ones(3, 8, device=device).to(dtype)
    for call, name in (
        (lambda: rk.rmsnorm(x, None, None), "x"),
        (lambda: rk.rms_norm(x, (8,)), "input"),
        (lambda: rk.RMSNorm(8, device=device)(x), "input"),
    ):
        with pytest.raises(rk.ContractTypeError, match=f"^{name} must have dtype"):
            call()


def test_a_swapped_argument_is_named_and_a_tensor_is_not_printed(device):
    """rmsnorm(x, (N,), w) in F.rms_norm's order: the error named eps and printed all of w's
    values; now it names the weight, and tensors are shown by shape and dtype."""
    x, w = torch.randn(4, 64, device=device), torch.randn(64, device=device)
    with pytest.raises(rk.ContractTypeError) as refused:
        rk.rmsnorm(x, (64,), w)
    assert str(refused.value) == "weight must be a torch.Tensor or None (got tuple (64,))"
    with pytest.raises(rk.ContractTypeError) as refused:
        rk.rmsnorm(x, w, w)
    assert str(refused.value) == (
        "eps must be a real number (got Tensor of shape (64,) and dtype torch.float32)"
    )
    with pytest.raises(rk.ContractTypeError) as refused:
        rk.rms_norm(x, w)  # normalized_shape forgotten
    assert str(refused.value).endswith("(got Tensor of shape (64,) and dtype torch.float32)")

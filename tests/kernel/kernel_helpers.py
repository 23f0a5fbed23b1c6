"""The one oracle and the tolerances every kernel test uses (float64 autograd, the reference).

Tolerances are read from ``conf/campaign/default.yaml`` (key ``tolerances``): they are fixed there
once, before any run, for the campaigns and these tests alike.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import torch
import yaml

import rmsnorm_kernel as rk
from rmsnorm_kernel.config import BackwardConfig
from rmsnorm_kernel.paths import CONFIG_DIR, REPO_ROOT

_CAMPAIGN = CONFIG_DIR / "campaign" / "default.yaml"


def _load_tolerances() -> dict[torch.dtype, dict[str, float]]:
    with open(_CAMPAIGN) as f:
        table = yaml.safe_load(f)["tolerances"]
    return {
        getattr(torch, name): {"atol": float(tol["atol"]), "rtol": float(tol["rtol"])}
        for name, tol in table.items()
    }


#: ``{torch dtype: {"atol": ..., "rtol": ...}}`` for float32, float16, bfloat16, float64.
TOLERANCES = _load_tolerances()


def loosest(*dtypes: torch.dtype) -> torch.dtype:
    """The dtype with the widest tolerance (mixed x / weight dtypes are checked against it)."""
    return max(dtypes, key=lambda d: torch.finfo(d).eps)


def oracle(x, weight, dy, eps=1e-6, *, offset=0.0, residual=None, dh=None, h_rounded=None):
    """float64 autograd through the reference: ``(y, h, dx, dw, dres)`` in float64.

    With ``residual``, the kernel normalises ``h = x + residual`` rounded to ``x.dtype`` (what the
    caller receives), and ``dh`` is the upstream gradient of the returned ``h`` (or none).
    ``h_rounded``: that rounded sum as the kernel returned it (default: PyTorch's rounding, which
    the kernels' equals). ``h``, ``dw`` and ``dres`` are
    None where they do not exist.
    """
    xd = x.detach().double().requires_grad_()
    wd = None if weight is None else weight.detach().double().requires_grad_()
    rd = None if residual is None else residual.detach().double().requires_grad_()
    h = xd
    if rd is not None:
        h = xd + rd
        rounded = h.detach().to(x.dtype) if h_rounded is None else h_rounded.detach()
        h = h + (rounded.double() - h.detach())  # the rounded sum, with the sum's gradient
    y = rk.rmsnorm_reference(h, wd, eps, offset=offset)
    if dh is not None:
        torch.autograd.backward([y, h], [dy.double(), dh.double()])
    else:
        y.backward(dy.double())
    return (
        y.detach(),
        None if rd is None else h.detach(),
        xd.grad,
        None if wd is None else wd.grad,
        None if rd is None else rd.grad,
    )


def x_away_from_zero(gen, *shape, scale=1.0):
    """Float32 normal values pushed away from 0 by ``scale / 4``, on the CPU: (*shape).

    dx carries a factor r = 1 / rms(row), and with N = 1 or 2 it is a near-total cancellation
    (u * r * (1 - y*y)), so its float32 rounding error is ~r * 6e-8 * |u| in ANY implementation
    (F.rms_norm's too). The tolerances' atol is absolute (1e-5), so rows with rms < ~0.1 would
    test the tolerance table, not the kernel: property tests draw x from here.
    """
    z = torch.randn(*shape, generator=gen)
    return scale * (z + 0.25 * torch.sign(z))


def oracle_y(x, weight, eps=1e-6, *, offset=0.0):
    """The oracle's forward alone: ``y`` in float64 (for tests without a backward)."""
    w = None if weight is None else weight.detach().double()
    return rk.rmsnorm_reference(x.detach().double(), w, eps, offset=offset)


def assert_close(actual, expected, dtype, what):
    """Every element within the tolerances of ``dtype`` (no mean excuses one failure)."""
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(
        actual.double().cpu(), expected.double().cpu(), msg=lambda m: f"{what}: {m}", **tol
    )


def assert_dweight_within_sum_bound(dw, x, dy, eps=1e-6, rstd=None):
    """dweight of many rows (no weight offset, F.rms_norm's rounding) against the float64 sum of
    its terms ``dy * x * r``, within the classical bound of a float32 sum of computed terms:
    ``|error| <= (M + 2) * 2**-24 * sum(|terms|)`` (M - 1 additions, and each term's two float32
    products). A float32 sum of M terms cannot meet an elementwise 1e-5 tolerance (the result's
    own ulp is larger); a mean instead of a sum, or a lost partial, breaks it.

    ``rstd`` (M,): the forward's saved float32 r, the one the backward reads; the terms then use
    it, so r's own rounding (Triton's approximate rsqrt: ~2 ulp) stays out of a test of the sum.
    Without it the float64 r stands in, and r's rounding is covered only where M is large: at
    M = 1 one term measured 1.93x ``M * 2**-24 * |term|`` on the H200, all of it r's rounding
    and the products'.
    """
    xd = x.detach().double()
    if rstd is None:
        r = torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps)
    else:
        r = rstd.detach().double()[:, None]
    assert_float32_sum_within_bound(dw, dy.double() * xd * r)


def assert_float32_sum_within_bound(total, terms):
    """``total`` (N,), a float32 sum over the M rows of ``terms`` (M, N) float64, against the
    float64 sum: ``|error| <= (M + 2) * 2**-24 * sum(|terms|)`` (M - 1 additions, and up to two
    float32 roundings in forming each term)."""
    error = (total.double() - terms.sum(0)).abs()
    bound = (terms.shape[0] + 2) * 2.0**-24 * terms.abs().sum(0)
    assert (error <= bound).all(), f"max error/bound {(error / bound).max().item():.3g}"


def check_against_oracle(x, weight, dtype, eps=1e-6, **kwargs):
    """Run ``rmsnorm`` forward + backward on fresh leaves; assert y, dx, dweight vs the oracle.

    ``dtype`` selects the tolerances. Returns ``(x, weight, y)`` (the leaves carry ``.grad``).
    """
    x = x.detach().requires_grad_()
    weight = None if weight is None else weight.detach().requires_grad_()
    y = rk.rmsnorm(x, weight, eps, **kwargs)
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref, _, dx_ref, dw_ref, _ = oracle(x, weight, dy, eps, **kwargs)
    assert y.dtype == x.dtype and x.grad.dtype == x.dtype
    assert_close(y, y_ref, dtype, "y")
    assert_close(x.grad, dx_ref, dtype, "dx")
    if weight is not None:
        assert weight.grad.dtype == weight.dtype
        assert_close(weight.grad, dw_ref, dtype, "dweight")
    return x, weight, y


def one_tile_backward_config(m: int, rows_per_program: int, **fields) -> BackwardConfig:
    """An explicit one-tile backward config for ``m`` rows, ``rows_per_program`` each (as many
    programs as that takes), float32 dweight partials; ``fields``: the rest (block, warps...)."""
    return BackwardConfig(
        one_tile=True,
        groups=-(-m // rows_per_program),
        rows_per_program=rows_per_program,
        dw_float64=False,
        **fields,
    )


def experiment_kernel(name: str) -> ModuleType:
    """``experiments/kernel_perf/<name>.py``, a candidate kernel that tune.py times and the package
    does not use, loaded as a module (that folder is not a package)."""
    path = REPO_ROOT / "experiments" / "kernel_perf" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_graph_replays(launch, want, what: str) -> None:
    """``launch()`` (a tuple of tensors or None) warmed up on a side stream, captured in a CUDA
    graph and replayed twice, its outputs zeroed before each replay: every tensor it returns
    equals ``want``'s, bit for bit."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch()  # warm up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = launch()
    for _ in range(2):
        for t in got:
            if t is not None:
                t.zero_()
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(got, want, strict=True):
            assert (a is None) == (b is None), what
            assert a is None or torch.equal(a, b), f"graph replay differs from eager: {what}"


def feature_matrix(test):
    """``test(device, offset, with_weight, llama)`` over the one-row kernel's features: offset 0
    and 1, a weight or none, Llama's rounding or not (the split-row and cluster kernels' tests)."""
    import pytest

    for name, values in (
        ("offset", [0.0, 1.0]),
        ("with_weight", [True, False]),
        ("llama", [False, True]),
    ):
        test = pytest.mark.parametrize(name, values)(test)
    return test


def feature_rows(device, with_weight: bool, m: int = 4, n: int = 700):
    """``(x, w or None)``: bf16 rows and a weight near 1 for :func:`feature_matrix` tests."""
    x = torch.randn(m, n, device=device).to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(torch.bfloat16) if with_weight else None
    return x, w


def forward_with(x, w, cfg, *, offset=0.0, residual=None, llama=False, keep_rstd=True, eps=1e-6):
    """``ops.launch_forward`` of rows ``x`` with an explicit config: ``(y, h or None, rstd)``,
    y in x's dtype."""
    from rmsnorm_kernel import ops

    return ops.launch_forward(
        x, w, residual, eps, offset, x.dtype, llama=llama, config=cfg, keep_rstd=keep_rstd
    )

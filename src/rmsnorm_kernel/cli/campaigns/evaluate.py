"""Run one campaign case: the implementation, PyTorch's same-dtype reference, the float64 oracle.

For a case with inputs ``x, w, dy`` (and optional ``residual``, ``offset``):

- *oracle*: :func:`rmsnorm_reference` on ``.double()`` copies, gradients by autograd in float64;
- *torch*: the same reference on the case's own dtype (PyTorch's error budget at that dtype);
- *kernel*: the implementation under test (the real op, or a mutant in the exercise).

With ``residual`` the kernel returns ``(y, h)``, ``h = x + residual`` stored in x's dtype. Two
claims are checked apart: ``h`` against the exact float64 sum (the ``y`` check includes it), and
``y``/``dx``/``dweight`` against the oracle normalising the ``h`` the kernel returned (a float64
leaf; its gradient is dx = dresidual). So the check does not depend on how ``h`` was rounded
(Triton's interpreter truncates float32 -> bfloat16 where the GPU rounds to nearest even).

An element passes when ``|kernel - oracle| <= atol + rtol * |oracle|`` (``torch.allclose``'s rule,
element by element) with the tolerances of the quantity's dtype, fixed in the config before the
run. ``ratio`` = kernel max abs error / torch max abs error, both against the oracle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from rmsnorm_kernel.cli.campaigns.cases import Case, make_inputs
from rmsnorm_kernel.cli.common import DTYPES
from rmsnorm_kernel.reference import rmsnorm_reference

# campaign command -> the quantity it checks
QUANTITY_OF = {"check-forward": "y", "check-backward": "dx", "check-weight": "dweight"}

Impl = Callable[..., torch.Tensor]


def reference_impl(x, weight, eps=1e-6, *, offset=0.0, residual=None):
    """The composite the kernel computes, written with the tutorial's reference."""
    h = x + residual if residual is not None else x
    y = rmsnorm_reference(h, weight, eps, offset=offset)
    return (y, h) if residual is not None else y


@dataclass
class QuantityResult:
    quantity: str
    dtype: str  # dtype of the checked tensor (tolerances come from it)
    atol: float
    rtol: float
    max_abs_err: float
    torch_max_abs_err: float
    worst_tol_fraction: float  # max over elements of |err| / (atol + rtol |oracle|); > 1 fails
    failing_elements: int
    elements: int
    ratio: float | None = None
    ratio_limit: float | None = None
    status: str = "pass"
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass
class CaseResult:
    case: Case
    quantities: dict[str, QuantityResult] = field(default_factory=dict)
    status: str = "pass"  # pass | fail | error | skipped
    message: str = ""
    seconds: float = 0.0
    h_max_abs_err: float | None = None  # residual cases: returned x + residual vs exact sum


def _run(impl: Impl, x, w, r, dy, eps, offset, grads_of: Sequence[str]):
    out = impl(x, w, eps, offset=offset, residual=r)
    y = out[0] if r is not None else out
    results = {"y": y.detach()}
    if r is not None:
        results["h"] = out[1].detach()
    targets = {"dx": x, "dweight": w}
    wanted = [q for q in grads_of if targets.get(q) is not None]
    if wanted:
        grads = torch.autograd.grad(y, [targets[q] for q in wanted], dy)
        results.update({q: g.detach() for q, g in zip(wanted, grads, strict=True)})
    return results


def _leaf(t: torch.Tensor | None, dtype: torch.dtype | None = None, grad: bool = False):
    if t is None:
        return None
    t = t.detach() if dtype is None else t.detach().to(dtype)
    return t.requires_grad_(grad)


def _compare(kernel: torch.Tensor, oracle: torch.Tensor, atol: float, rtol: float):
    k = kernel.double()
    err = (k - oracle).abs()
    bound = atol + rtol * oracle.abs()
    bad = ~(err <= bound)  # NaN/inf in the kernel output count as failures
    finite_err = torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))
    max_abs = float(finite_err.max()) if err.numel() else 0.0
    worst = float((finite_err / bound).max()) if err.numel() else 0.0
    return max_abs, worst, int(bad.sum())


def evaluate_case(
    case: Case,
    impl: Impl,
    quantities: Sequence[str],
    *,
    eps: float,
    seed: int,
    device: torch.device | str,
    tolerances: Mapping[str, Mapping[str, float]],
    ratio_limits: Mapping[str, float | None] | None = None,
) -> CaseResult:
    """Evaluate ``quantities`` (a subset of y, dx, dweight) of one case."""
    result = CaseResult(case=case)
    start = time.perf_counter()
    if case.weight_dtype is None:
        quantities = [q for q in quantities if q != "dweight"]
        if not quantities:
            result.status, result.message = "skipped", "no weight: no dweight to check"
            return result
    inp = make_inputs(case, device, seed)
    grads_of = [q for q in quantities if q != "y"]
    need_grad = bool(grads_of)
    dy = inp.dy
    try:
        kernel = _run(
            impl,
            _leaf(inp.x, grad=need_grad),
            _leaf(inp.weight, grad=need_grad),
            _leaf(inp.residual, grad=need_grad),
            dy,
            eps,
            case.offset,
            grads_of,
        )
    except Exception as exc:  # a refusal of a configured case is a failure, with its message
        result.status, result.message = "error", f"{type(exc).__name__}: {exc}"
        result.seconds = time.perf_counter() - start
        return result
    f64 = torch.float64
    x_in, h_check = inp.x, None
    if inp.residual is not None:
        # normalisation checked on the stream the kernel returned; the stream checked on its own
        x_in = kernel["h"]
        h_check = (kernel["h"], inp.x.double() + inp.residual.double())
    same = _run(
        reference_impl,
        _leaf(x_in, grad=need_grad),
        _leaf(inp.weight, grad=need_grad),
        None,
        dy,
        eps,
        case.offset,
        grads_of,
    )
    oracle = _run(
        reference_impl,
        _leaf(x_in, f64, need_grad),
        _leaf(inp.weight, f64, need_grad),
        None,
        dy.double(),
        eps,
        case.offset,
        grads_of,
    )
    for q in quantities:
        dtype = case.weight_dtype if q == "dweight" else case.dtype
        tol = tolerances[dtype]
        atol, rtol = float(tol["atol"]), float(tol["rtol"])
        if kernel[q].shape != oracle[q].shape or kernel[q].dtype != DTYPES[dtype]:
            qr = QuantityResult(
                q,
                dtype,
                atol,
                rtol,
                float("inf"),
                float("nan"),
                float("inf"),
                oracle[q].numel(),
                oracle[q].numel(),
                status="fail",
                message=f"{q}: got {tuple(kernel[q].shape)} {kernel[q].dtype}, "
                f"expected {tuple(oracle[q].shape)} {DTYPES[dtype]}",
            )
            result.quantities[q] = qr
            continue
        k_err, worst, failing = _compare(kernel[q], oracle[q], atol, rtol)
        t_err, _, _ = _compare(same[q], oracle[q], atol, rtol)
        if t_err > 0:
            ratio = k_err / t_err
        else:  # float64: PyTorch's reference *is* the oracle, a ratio means nothing
            ratio = 1.0 if k_err == 0 else None
        limit = (ratio_limits or {}).get(dtype)
        qr = QuantityResult(
            q,
            dtype,
            atol,
            rtol,
            k_err,
            t_err,
            worst,
            failing,
            oracle[q].numel(),
            ratio=ratio,
            ratio_limit=limit,
        )
        if failing:
            qr.status = "fail"
            qr.message = (
                f"{failing}/{qr.elements} elements of {q} outside atol={atol:g} rtol={rtol:g}"
            )
        elif limit is not None and ratio is not None and ratio > limit:
            qr.status = "fail"
            qr.message = (
                f"{q}: kernel error {k_err:.3g} is {ratio:.2f}x PyTorch's {dtype} "
                f"reference error {t_err:.3g} (limit {limit:g}x)"
            )
        result.quantities[q] = qr
    if h_check is not None and "y" in quantities:
        tol = tolerances[case.dtype]
        h_err, _, h_bad = _compare(h_check[0], h_check[1], float(tol["atol"]), float(tol["rtol"]))
        result.h_max_abs_err = h_err
        if h_bad:
            qr = result.quantities["y"]
            qr.status = "fail"
            qr.message = (qr.message + "; " if qr.message else "") + (
                f"{h_bad} elements of the returned x + residual outside tolerance"
            )
    failed = [qr for qr in result.quantities.values() if not qr.passed]
    if failed:
        result.status = "fail"
        result.message = "; ".join(qr.message for qr in failed)
    result.seconds = time.perf_counter() - start
    return result

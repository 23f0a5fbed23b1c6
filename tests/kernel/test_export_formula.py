"""``torch.onnx.export``: the entry points record ``export_formula`` (standard torch ops) instead
of the Triton op, which has no ONNX function. The formula must compute what the kernels do.

Checked without onnx installed: the formula against the kernels on every rounding rule, dtype
pair and residual, and the dispatch under ``torch.jit.trace`` (the legacy exporter's tracer)
with ``torch.onnx.is_in_onnx_export`` reporting an export. (With onnx 1.x and onnxscript, both
exporters' graphs ran in onnx's ReferenceEvaluator equal to the kernel's output: see the
README, "Drop-ins for Liger-Kernel, Apex and flash-attention code".)
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close

import rmsnorm_kernel as rk
from rmsnorm_kernel.export_formula import export_formula

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
PAIRS = [(F32, F32), (BF16, BF16), (F16, F32), (BF16, F32), (F64, F64)]


@pytest.mark.parametrize("rounding", ["torch", "llama"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(("x_dtype", "w_dtype"), PAIRS, ids=str)
def test_the_formula_computes_what_the_kernels_do(x_dtype, w_dtype, residual, rounding, device):
    x = torch.randn(3, 37, device=device, dtype=x_dtype)
    w = (torch.rand(37, device=device) + 0.5).to(w_dtype)
    r = torch.randn(3, 37, device=device, dtype=x_dtype) if residual else None
    ours = rk.rmsnorm(x, w, 1e-6, offset=0.5, residual=r, rounding=rounding)
    formula = export_formula(x, w, 1e-6, 0.5, r, rounding == "llama")
    ours, formula = (ours, formula) if residual else ((ours,), (formula,))
    for got, want, what in zip(formula, ours, ("y", "h")[: len(ours)], strict=True):
        assert got.dtype == want.dtype, what
        assert_close(got, want, want.dtype, what)


def test_an_export_records_the_formula_not_the_op(monkeypatch, device):
    monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
    norm = rk.RMSNorm(8, device=device)
    x = torch.randn(2, 8, device=device)
    rk.reset_calls()
    traced = torch.jit.trace(norm, (x,), check_trace=False)  # (the check reruns it eagerly)
    graph = str(traced.graph)
    assert "rmsnorm_kernel::" not in graph and "aten::rsqrt" in graph
    assert rk.CALLS["forward"] == 0
    monkeypatch.undo()
    assert_close(traced(x), norm(x), F32, "y")

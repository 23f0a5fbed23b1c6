"""The oracle itself: the tutorial's worked examples, gradcheck, and manual_backward == autograd."""

from __future__ import annotations

import pytest
import torch

from rmsnorm_kernel import manual_backward, rmsnorm_reference


def test_worked_example_unit_weight():
    y = rmsnorm_reference(torch.tensor([[3.0, 4.0]]), torch.tensor([1.0, 1.0]), 1e-6)
    torch.testing.assert_close(y, torch.tensor([[0.848528, 1.131371]]), atol=1e-6, rtol=0)


def test_worked_example_weight_scales_columns():
    y = rmsnorm_reference(torch.tensor([[3.0, 4.0]]), torch.tensor([2.0, 0.5]), 1e-6)
    torch.testing.assert_close(y, torch.tensor([[1.697056, 0.565685]]), atol=1e-6, rtol=0)


def test_worked_example_backward():
    x = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    dx, _ = manual_backward(
        x, torch.ones(2, dtype=torch.float64), torch.tensor([[1.0, 2.0]]).double()
    )
    torch.testing.assert_close(
        dx, torch.tensor([[-0.090510, 0.067882]]).double(), atol=1e-6, rtol=0
    )


def test_row_of_257_ones():
    y = rmsnorm_reference(torch.ones(1, 257), torch.ones(257), 1e-6)
    torch.testing.assert_close(y, torch.full((1, 257), 0.9999995), atol=1e-7, rtol=0)


def test_gradcheck_float64():
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rmsnorm_reference(a, b, 1e-6), (x, w))


@pytest.mark.parametrize("m,n", [(1, 5), (17, 33)])
def test_manual_backward_equals_autograd(m, n):
    x = torch.randn(m, n, dtype=torch.float64, requires_grad=True)
    w = torch.randn(n, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(m, n, dtype=torch.float64)
    rmsnorm_reference(x, w, 1e-6).backward(dy)
    dx, dw = manual_backward(x.detach(), w.detach(), dy, 1e-6)
    torch.testing.assert_close(dx, x.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dw, w.grad, rtol=1e-12, atol=1e-12)


def test_reference_returns_input_dtype_and_upcasts():
    x = torch.full((1, 4), 300.0, dtype=torch.float16)  # 300**2 * 4 overflows a float16 sum
    y = rmsnorm_reference(x, torch.ones(4, dtype=torch.float16))
    assert y.dtype == torch.float16
    assert torch.isfinite(y).all()

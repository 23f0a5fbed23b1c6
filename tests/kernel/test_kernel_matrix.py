"""y, dx and dweight of the Triton kernels against the float64 oracle, over odd sizes and dtypes."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import check_against_oracle

import rmsnorm_kernel as rk

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
SIZES = [(m, n) for m in (1, 17) for n in (1, 255, 256, 257, 1000, 4096)] + [
    (128, 257),
    (128, 1000),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n", SIZES)
def test_matches_oracle(m, n, dtype, device):
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    check_against_oracle(x, w, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_issue_shape_5x333(dtype, device):
    """The tutorial's acceptance case: (5, 333) fp32 and fp16 within its tolerances."""
    x = torch.randn(5, 333, device=device, dtype=dtype)
    w = torch.rand(333, device=device, dtype=dtype).add_(0.5)
    check_against_oracle(x, w, dtype)


def test_seed_worked_examples_on_kernel(device):
    x = torch.tensor([[3.0, 4.0]], device=device, requires_grad=True)
    y = rk.rmsnorm(x, torch.ones(2, device=device), 1e-6)
    torch.testing.assert_close(y.cpu(), torch.tensor([[0.848528, 1.131371]]), atol=1e-6, rtol=0)
    y.backward(torch.tensor([[1.0, 2.0]], device=device))
    torch.testing.assert_close(
        x.grad.cpu(), torch.tensor([[-0.090510, 0.067882]]), atol=1e-6, rtol=0
    )
    y2 = rk.rmsnorm(x.detach(), torch.tensor([2.0, 0.5], device=device), 1e-6)
    torch.testing.assert_close(y2.cpu(), torch.tensor([[1.697056, 0.565685]]), atol=1e-6, rtol=0)


def test_row_of_257_ones_divides_by_n_not_block(device):
    y = rk.rmsnorm(torch.ones(1, 257, device=device), torch.ones(257, device=device), 1e-6)
    torch.testing.assert_close(y.cpu(), torch.full((1, 257), 0.9999995), atol=1e-7, rtol=0)


def test_dweight_is_a_sum_over_rows_not_a_mean(device):
    row = torch.randn(1, 64, device=device, dtype=torch.float64)
    w = torch.ones(64, device=device, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(1, 64, device=device, dtype=torch.float64)
    rk.rmsnorm(row, w, 1e-6).backward(dy)
    one_row = w.grad.clone()
    w.grad = None
    rk.rmsnorm(row.expand(17, 64), w, 1e-6).backward(dy.expand(17, 64))
    torch.testing.assert_close(w.grad, 17 * one_row, rtol=1e-12, atol=1e-12)


def test_dweight_is_bitwise_deterministic(device):
    x = torch.randn(67, 300, device=device)
    w = torch.randn(300, device=device, requires_grad=True)
    dy = torch.randn(67, 300, device=device)
    grads = []
    for _ in range(2):
        w.grad = None
        rk.rmsnorm(x, w, 1e-6).backward(dy)
        grads.append(w.grad.clone())
    assert torch.equal(grads[0], grads[1])


def test_calls_count_wrapper_passes(device):
    x = torch.randn(4, 8, device=device, requires_grad=True)
    w = torch.ones(8, device=device, requires_grad=True)
    rk.reset_calls()
    for _ in range(3):
        rk.rmsnorm(x, w, 1e-6).sum().backward()
    assert rk.CALLS == {"forward": 3, "backward": 3}
    rk.rmsnorm(x.detach(), w.detach(), 1e-6)
    assert rk.CALLS == {"forward": 4, "backward": 3}


@pytest.mark.parametrize("tree_max", [0, 1 << 62], ids=["sum_launch", "in_launch_tree"])
@pytest.mark.parametrize("m,n", [(17, 300), (23, 70)])
def test_both_dweight_finishes(m, n, tree_max, device, monkeypatch):
    """dweight through the fixed tree in the backward launch, or through dweight_sum_kernel (the
    launcher picks by size): both against the oracle, both bitwise repeatable."""
    from rmsnorm_kernel import ops

    monkeypatch.setattr(ops, "TREE_MAX_ELEMS", tree_max)
    monkeypatch.setattr(ops, "TREE_ALWAYS_N", 0 if tree_max == 0 else ops.TREE_ALWAYS_N)
    x = torch.randn(m, n, device=device)
    w = torch.randn(n, device=device, requires_grad=True)
    dy = torch.randn(m, n, device=device)
    grads = []
    for _ in range(2):
        w.grad = None
        check_against_oracle(x, w, torch.float32)
        rk.rmsnorm(x, w, 1e-6).backward(dy)
        grads.append(w.grad.clone())
    assert torch.equal(grads[0], grads[1])

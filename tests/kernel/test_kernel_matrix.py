"""y, dx and dweight of the Triton kernels against the float64 oracle, over odd sizes and dtypes."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, check_against_oracle, oracle, oracle_y

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


@pytest.mark.parametrize("tree", [False, True], ids=["sum_launch", "in_launch_tree"])
@pytest.mark.parametrize("dw_float64", [False, True], ids=["rows_fp32", "rows_fp64"])
@pytest.mark.parametrize("m,n", [(17, 300), (23, 70)])
def test_both_dweight_finishes(m, n, tree, dw_float64, device):
    """dweight through the fixed tree in the backward launch, or through dweight_sum_kernel, with
    rows accumulated in float32 or float64 (explicit configs; the heuristic picks by size): all
    against the oracle, all bitwise repeatable."""
    import dataclasses

    from rmsnorm_kernel import config, ops

    x = torch.randn(m, n, device=device)
    w = torch.randn(n, device=device)
    dy = torch.randn(m, n, device=device)
    index = ops._device_index(x)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    chosen = config.backward_config(m, n, index)
    cfg = dataclasses.replace(chosen, tree=tree, dw_float64=dw_float64, dw_columns=0, dw_rows=0)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    grads = []
    for _ in range(2):
        dx, dw = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)
        assert_close(dx, dx_ref, torch.float32, "dx")
        assert_close(dw, dw_ref, torch.float32, "dweight")
        grads.append(dw)
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("fanout", [2, 3, 8])
@pytest.mark.parametrize("m,groups", [(23, 23), (23, 12), (40, 10), (9, 1)])
def test_dweight_tree_of_any_fanout(m, groups, fanout, device):
    """The in-launch tree with 2, 3 or 8 children per node over 1-23 leaves (full and partial nodes,
    a lone child carried up a level): dweight against the oracle, bitwise repeated, and (on
    the GPU, where one counter buffer serves every launch on a stream) the counters left at zero
    for the next launch."""
    import dataclasses

    import triton

    from rmsnorm_kernel import config, ops

    n = 70
    x = torch.randn(m, n, device=device)
    w = torch.randn(n, device=device)
    dy = torch.randn(m, n, device=device)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    rows = triton.cdiv(m, groups)
    cfg = dataclasses.replace(
        config.backward_config(m, n, ops._device_index(x)),
        dw_columns=0,  # the tree, not the small-M column strips a GPU's heuristic may take
        dw_rows=0,
        groups=triton.cdiv(m, rows),
        rows_per_program=rows,
        tree=True,
        fanout=fanout,
    )
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    first = None
    for _ in range(2):
        dx, dw = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)
        assert_close(dx, dx_ref, torch.float32, "dx")
        assert_close(dw, dw_ref, torch.float32, f"dweight, fanout {fanout}")
        first = dw if first is None else first
        assert torch.equal(dw, first)
    counters = ops.tree_counters(x.device, ops._device_index(x), cfg.groups)
    assert not counters.any()


def test_explicit_configs_are_checked(device):
    """A config that cannot run the shape is refused by field name, before any output."""
    import dataclasses

    from rmsnorm_kernel import config, ops

    x = torch.randn(10, 300, device=device)
    w = torch.randn(300, device=device)
    index = ops._device_index(x)
    # The several-rows kernel's config, whatever the heuristic picks here (on a GPU, 10 rows
    # take the one-row kernel, whose block may be narrower than N: it walks chunks).
    fwd = config.ForwardConfig(512, 1, 4)
    with pytest.raises(ValueError, match="ForwardConfig.block must be >= N = 300"):
        ops.launch_forward(
            x, w, None, 1e-6, 0.0, x.dtype, config=dataclasses.replace(fwd, block=256)
        )
    with pytest.raises(ValueError, match="ForwardConfig.num_warps must be one of"):
        ops.launch_forward(
            x, w, None, 1e-6, 0.0, x.dtype, config=dataclasses.replace(fwd, num_warps=3)
        )
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    bwd = config.backward_config(10, 300, index)
    for bad, match in [
        (dict(groups=bwd.groups + 5), "no empty program"),
        (dict(block=300), "power of two"),
        (dict(block=128), "block must be >= N = 300 with one_tile"),
        (dict(fanout=1), "fanout must be >= 2"),
    ]:
        with pytest.raises(ValueError, match=match):
            ops.launch_backward(
                x, x, w, rstd, 0.0, None, x.dtype, config=dataclasses.replace(bwd, **bad)
            )


def test_explicit_forward_configs_agree(device):
    """Every forward geometry computes the same function: rows kernel at several row counts,
    one pass, and the chunked two-pass walk of a row narrower than its chunks."""
    from rmsnorm_kernel import ops
    from rmsnorm_kernel.config import ForwardConfig

    x = torch.randn(9, 300, device=device)
    w = torch.randn(300, device=device)
    expected = oracle_y(x, w)
    for cfg in [
        ForwardConfig(512, 1, 4),
        ForwardConfig(512, 4, 8),
        ForwardConfig(512, 0, 4),
        ForwardConfig(128, 0, 4),  # three chunks of 128 columns
    ]:
        y, _, _ = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype, config=cfg)
        assert_close(y, expected, torch.float32, f"y with {cfg}")

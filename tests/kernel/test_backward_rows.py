"""The several-rows backward (``BackwardConfig.rows > 1``: a ``(rows, block)`` tile per step)
against the float64 oracle, and against the one-row kernel where the oracle is another test's
(Llama's rounding): every feature of the one-row kernel, on grids whose programs own a number of
rows that is not a multiple of the tile (a partial last step), bitwise repeatable."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from kernel_helpers import assert_close, oracle

from rmsnorm_kernel import config, ops

GPU = pytest.mark.gpu


def _config(m, n, x, rows, tree, rows_per_program=5):
    base = config.backward_config(m, n, ops._device_index(x))
    return dataclasses.replace(
        base,
        groups=-(-m // rows_per_program),
        rows_per_program=rows_per_program,
        tree=tree,
        rows=rows,
        dw_columns=0,  # not the small-M column strips a GPU's heuristic may take
        dw_rows=0,
    )


def _backward(x, w, dy, cfg, dh=None, llama=False):
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype, llama=llama)
    return ops.launch_backward(dy, x, w, rstd, 0.0, dh, x.dtype, llama=llama, config=cfg)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=GPU)], ids=str
)
@pytest.mark.parametrize("tree", [False, True], ids=["sum_launch", "in_launch_tree"])
@pytest.mark.parametrize("rows", [2, 4])
@pytest.mark.parametrize("m,n", [(23, 70), (9, 300)])
def test_rows_backward_matches_oracle(m, n, rows, tree, dtype, device):
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.randn(m, n, device=device, dtype=dtype)
    cfg = _config(m, n, x, rows, tree)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    first = None
    for _ in range(2):
        dx, dw = _backward(x, w, dy, cfg)
        assert_close(dx, dx_ref, dtype, f"dx, {cfg}")
        assert_close(dw, dw_ref, dtype, f"dweight, {cfg}")
        first = dw if first is None else first
        assert torch.equal(dw, first)


@pytest.mark.parametrize("tree", [False, True], ids=["sum_launch", "in_launch_tree"])
@pytest.mark.parametrize("m,n", [(37, 100), (41, 64)])
def test_sixteen_row_tiles_of_short_rows_match_oracle(m, n, tree, device):
    """BWD_ROWS's plan at 64 / 128 columns (16 rows a step): 3 programs of 16 rows, the last
    tile past M, and (n = 100) a row narrower than its 128-wide block."""
    x = torch.randn(m, n, device=device, dtype=torch.float16)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(torch.float16)
    dy = torch.randn(m, n, device=device, dtype=torch.float16)
    cfg = _config(m, n, x, 16, tree, rows_per_program=16)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    dx, dw = _backward(x, w, dy, cfg)
    assert_close(dx, dx_ref, torch.float16, f"dx, {cfg}")
    assert_close(dw, dw_ref, torch.float16, f"dweight, {cfg}")
    assert torch.equal(dw, _backward(x, w, dy, cfg)[1])


@pytest.mark.parametrize("rows", [2, 8])
def test_rows_backward_without_weight_with_dh(rows, device):
    """No weight (no dweight, u = dy) and the gradient of a returned x + residual added to dx;
    a 3-row program (fewer rows than one tile of 8)."""
    m, n = 10, 130
    x = torch.randn(m, n, device=device)
    dy = torch.randn(m, n, device=device)
    dh = torch.randn(m, n, device=device)
    cfg = _config(m, n, x, rows, tree=False, rows_per_program=3)
    dx, dw = _backward(x, None, dy, cfg, dh=dh)
    assert dw is None
    _, _, dx_ref, _, _ = oracle(x, None, dy)
    assert_close(dx, dx_ref + dh.double(), torch.float32, "dx + dh")


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU)])
def test_rows_backward_llama_rounding_agrees_with_one_row(dtype, device):
    """Llama's rounding (dweight from the rounded normalised value): the tile gives what the
    one-row kernel gives (tests/kernel/test_llama_rounding.py checks that one against HF's
    formula), within the dtype's tolerance."""
    m, n = 21, 200
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = torch.randn(n, device=device, dtype=torch.float32)
    dy = torch.randn(m, n, device=device, dtype=torch.float32)
    one = _backward(x, w, dy, _config(m, n, x, 1, tree=True), llama=True)
    tile = _backward(x, w, dy, _config(m, n, x, 4, tree=True), llama=True)
    assert_close(tile[0], one[0], dtype, "dx")
    assert_close(tile[1], one[1], dtype, "dweight")


def test_rows_config_is_checked(device):
    x = torch.randn(8, 64, device=device)
    w = torch.randn(64, device=device)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    cfg = _config(8, 64, x, 2, tree=False)
    for bad, match in [
        (dict(rows=3), "BackwardConfig.rows must be a power of two"),
        (dict(rows=2, one_tile=False, block=32), "rows > 1 needs one_tile"),
    ]:
        with pytest.raises(ValueError, match=match):
            ops.launch_backward(
                x, x, w, rstd, 0.0, None, x.dtype, config=dataclasses.replace(cfg, **bad)
            )


def test_rows_backward_reads_row_strided_views(device):
    """x, dy and dh as row-strided views (row strides N + 7, N + 3, 2N): each read with its own
    stride, dx written contiguous."""
    m, n = 13, 90
    x = torch.randn(m, n + 7, device=device)[:, :n]
    dy = torch.randn(m, n + 3, device=device)[:, 3:]
    dh = torch.randn(m, 2 * n, device=device)[:, n:]
    w = torch.randn(n, device=device)
    cfg = _config(m, n, x, 4, tree=True, rows_per_program=6)
    dx, dw = _backward(x, w, dy, cfg, dh=dh)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    assert dx.is_contiguous()
    assert_close(dx, dx_ref + dh.double(), torch.float32, "dx + dh")
    assert_close(dw, dw_ref, torch.float32, "dweight")

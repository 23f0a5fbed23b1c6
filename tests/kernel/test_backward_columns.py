"""The column-strip backward (``BackwardConfig.dw_columns > 0``: dx by row programs, dweight by
column programs of the same launch, with no partials and no second launch) against the float64
oracle and against the default backward: every feature of the one-row kernel (weight offset,
dh, dy's extra parts, dx's second dtype, Llama's rounding, strided rows), strips and row steps
that do not divide N and M, bitwise repeatable."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from kernel_helpers import assert_close, oracle

from rmsnorm_kernel import config, ops
from rmsnorm_kernel.contract import ContractValueError

GPU = pytest.mark.gpu


def _config(x, dw_columns=16, dw_rows=8, rows_per_program=3, float64=True):
    m, n = x.shape
    base = config.backward_config(m, n, ops._device_index(x))
    return dataclasses.replace(
        base,
        groups=-(-m // rows_per_program),
        rows_per_program=rows_per_program,
        tree=False,
        dw_float64=float64,
        dw_columns=dw_columns,
        dw_rows=dw_rows,
    )


def _backward(x, w, dy, cfg, **kwargs):
    llama = kwargs.pop("llama", False)
    offset = kwargs.pop("offset", 0.0)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, offset, x.dtype, llama=llama)
    dh = kwargs.pop("dh", None)
    return ops.launch_backward(
        dy, x, w, rstd, offset, dh, x.dtype, llama=llama, config=cfg, **kwargs
    )


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=GPU)], ids=str
)
@pytest.mark.parametrize("float64", [True, False], ids=["dw_f64", "dw_f32"])
@pytest.mark.parametrize("dw_columns,dw_rows", [(16, 8), (64, 4), (256, 32)])
@pytest.mark.parametrize("m,n", [(23, 70), (9, 257)])
def test_columns_backward_matches_oracle(m, n, dw_columns, dw_rows, float64, dtype, device):
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.randn(m, n, device=device, dtype=dtype)
    cfg = _config(x, dw_columns, dw_rows, float64=float64)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    dx0, _ = _backward(x, w, dy, dataclasses.replace(cfg, dw_columns=0, dw_rows=0))
    first = None
    for _ in range(2):
        dx, dw = _backward(x, w, dy, cfg)
        assert dw.dtype == w.dtype and dw.shape == (n,)
        assert_close(dx, dx_ref, dtype, f"dx, {cfg}")
        assert_close(dw, dw_ref, dtype, f"dweight, {cfg}")
        assert torch.equal(dx, dx0), "dx differs from the one-row kernel's at the same config"
        first = dw if first is None else first
        assert torch.equal(dw, first)


def test_columns_backward_offset_dh_strided_rows(device):
    """A weight offset (Gemma's 1 + w), dh added to dx, x and dy rows strided inside wider
    buffers."""
    m, n = 13, 100
    xb = torch.randn(m, n + 28, device=device)
    dyb = torch.randn(m, n + 12, device=device)
    x, dy = xb[:, :n], dyb[:, :n]
    w = 0.5 * torch.randn(n, device=device)
    dh = torch.randn(m, n, device=device)
    cfg = _config(x, 32, 4, rows_per_program=4)
    dx, dw = _backward(
        x, w, dy, cfg, offset=1.0, dh=dh, stride_x=xb.stride(0), stride_dy=dyb.stride(0)
    )
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy, offset=1.0)
    assert_close(dx, dx_ref + dh.double(), torch.float32, "dx + dh")
    assert_close(dw, dw_ref, torch.float32, "dweight")


def test_columns_backward_dy_parts_and_dx_copy_match_the_default(device):
    """dy given in three parts (the Inductor pass's folded sum) and dx's bfloat16 copy: the same
    dx, dx copy and (within tolerance) dweight as the default backward."""
    m, n = 11, 96
    x, w = torch.randn(m, n, device=device), torch.randn(n, device=device)
    dy, b, c = (torch.randn(m, n, device=device) for _ in range(3))
    parts = ((b, n), (c, n))
    out = [torch.empty(m, n, device=device, dtype=torch.bfloat16) for _ in range(2)]
    cfg = _config(x, 32, 8)
    results = [
        _backward(x, w, dy, k, dy_parts=parts, dx2_out=o)
        for k, o in ((cfg, out[0]), (dataclasses.replace(cfg, dw_columns=0, dw_rows=0), out[1]))
    ]
    (dx, dw), (dx0, dw0) = results
    assert torch.equal(dx, dx0) and torch.equal(out[0], out[1])
    assert_close(dw, dw0, torch.float32, "dweight with dy parts")
    _, _, _, dw_ref, _ = oracle(x, w, dy + b + c)
    assert_close(dw, dw_ref, torch.float32, "dweight against the oracle of dy + b + c")


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU)])
def test_columns_backward_llama_rounding_agrees_with_one_row(dtype, device):
    """Llama's rounding (dweight from the rounded normalised value): what the one-row kernel
    gives (tests/kernel/test_llama_rounding.py checks that one against HF's formula)."""
    m, n = 21, 200
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = torch.randn(n, device=device, dtype=torch.float32)
    dy = torch.randn(m, n, device=device, dtype=torch.float32)
    cfg = _config(x, 64, 8)
    one = _backward(x, w, dy, dataclasses.replace(cfg, dw_columns=0, dw_rows=0), llama=True)
    cols = _backward(x, w, dy, cfg, llama=True)
    assert torch.equal(cols[0], one[0])
    assert_close(cols[1], one[1], torch.float32, "llama dweight")


def test_columns_backward_without_weight(device):
    m, n = 7, 50
    x, dy = torch.randn(m, n, device=device), torch.randn(m, n, device=device)
    dx, dw = _backward(x, None, dy, _config(x))
    assert dw is None
    _, _, dx_ref, _, _ = oracle(x, None, dy)
    assert_close(dx, dx_ref, torch.float32, "dx without weight")


@pytest.mark.parametrize(
    "fields, rule",
    [
        (dict(dw_columns=24, dw_rows=8), "dw_columns must be a power of two"),
        (dict(dw_columns=16, dw_rows=0), "dw_rows must be a power of two"),
        (dict(dw_columns=0, dw_rows=8), "dw_rows needs dw_columns > 0"),
        (dict(dw_columns=16, dw_rows=8, tree=True), "dw_columns needs one_tile"),
        (dict(dw_columns=16, dw_rows=8, rows=2), "dw_columns needs one_tile"),
    ],
)
def test_columns_config_refused_by_name(fields, rule, device):
    x = torch.randn(8, 40, device=device)
    cfg = dataclasses.replace(_config(x), **fields)
    with pytest.raises(ContractValueError, match=rule):
        _backward(x, torch.randn(40, device=device), torch.randn_like(x), cfg)


@pytest.mark.parametrize(
    "m,n,itemsize",
    [(128, 257, 4), (256, 1024, 2), (256, 4096, 2), (1024, 1024, 2), (512, 4096, 2), (1, 8, 2)],
)
def test_heuristic_takes_strips_at_small_m_on_a_gpu(m, n, itemsize):
    """COLUMNS_MAX_ELEMS: a GPU's small-M backward finishes dweight by strips, in one launch."""
    cfg = config.backward_config(m, n, 0, itemsize=itemsize)  # small M: no SM count asked
    assert (cfg.dw_columns, cfg.dw_rows) == (
        config.COLUMNS_STRIP,
        min(config.COLUMNS_TILE // config.COLUMNS_STRIP, 1 << (m - 1).bit_length()),
    )
    cfg.check(m, n)


@pytest.mark.parametrize(
    "m,n,device_index,float64",
    [
        (1024, 4096, 0, False),  # over COLUMNS_MAX_ELEMS: the sum finish measured faster
        (2048, 2048, 0, False),
        (128, 257, None, False),  # the interpreter keeps the partials its tests cover
        (128, 257, 0, True),  # float64 math: not measured
    ],
)
def test_heuristic_keeps_the_sum_finish_elsewhere(m, n, device_index, float64):
    cfg = config.backward_config(m, n, device_index, float64)
    assert cfg.dw_columns == 0 and cfg.dw_rows == 0

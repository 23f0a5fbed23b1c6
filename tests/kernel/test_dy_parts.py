"""The backward's folded dy sum (``rmsnorm_bwd(dy, ..., dy_b=, dy_c=)``, set by the Inductor
pass): with dy = ``(a + b) + c`` summed in the accumulator and rounded once to dy's dtype (what
Inductor's fused add stores), every backward kernel (one tile, several rows a step, column tiles
after the row reduction, tensor descriptors) gives bit for bit what it gives for that dy stored
first; the op refuses parts of another shape, dtype or device by name, before any output. And
the second dx copy (``dx2_dtype``, the pass's dx cast): bit for bit dx's cast, in every kernel."""

from __future__ import annotations

import pytest
import torch
import triton
from kernel_helpers import assert_close, one_tile_backward_config, oracle, x_away_from_zero

import rmsnorm_kernel as rk
from rmsnorm_kernel import ops
from rmsnorm_kernel.config import BackwardConfig
from rmsnorm_kernel.contract import ContractValueError

DEVICE = "cuda" if rk.BACKEND == "cuda" else "cpu"
BWD = torch.ops.rmsnorm_kernel.rmsnorm_bwd


def _parts(m, n, dtype, count, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = x_away_from_zero(gen, m, n).to(DEVICE, dtype)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(DEVICE, dtype)
    parts = [torch.randn(m, n, generator=gen).to(DEVICE, dtype) for _ in range(count)]
    return x, w, parts


def _stored_sum(parts):
    """What Inductor's fused add of the parts stores: ((a + b) + c) in the accumulator, one
    rounding to their dtype."""
    acc = torch.float64 if parts[0].dtype == torch.float64 else torch.float32
    total = parts[0].to(acc)
    for p in parts[1:]:
        total = total + p.to(acc)
    return total.to(parts[0].dtype)


def _configs(m, n):
    """Every backward kernel for (m, n): one tile, rows a step, column tiles, descriptors."""
    return {
        "one tile": one_tile_backward_config(
            m, 3, block=triton.next_power_of_2(n), num_warps=4, tree=False
        ),
        "rows": one_tile_backward_config(
            m, 4, block=triton.next_power_of_2(n), num_warps=4, tree=True, rows=2
        ),
        "column tiles": BackwardConfig(
            block=32,
            one_tile=False,
            groups=2,
            rows_per_program=-(-m // 2),
            num_warps=4,
            tree=False,
            dw_float64=False,
        ),
        "descriptors": one_tile_backward_config(
            m, 4, block=n, num_warps=4, tree=False, rows=2, stages=1, tma=True
        ),
    }


@pytest.mark.parametrize("kernel", ["one tile", "rows", "column tiles", "descriptors"])
@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_kernel_reads_the_sum_as_stored(kernel, count, dtype):
    m, n = 11, 64
    x, w, parts = _parts(m, n, dtype, count)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype)
    cfg = _configs(m, n)[kernel]
    dy = _stored_sum(parts)
    want = ops.launch_backward(dy, x, w, rstd, 0.0, None, dtype, config=cfg)
    got = ops.launch_backward(
        parts[0],
        x,
        w,
        rstd,
        0.0,
        None,
        dtype,
        config=cfg,
        dy_parts=tuple((p, p.stride(0)) for p in parts[1:]),
    )
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    assert_close(got[0], dx_ref, dtype, "dx")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_the_op_with_parts_equals_the_op_on_their_sum(dtype):
    """Through the registered op (the pass's call), with a residual gradient ``dh`` as well and
    parts that are strided views (rows read with their own stride)."""
    m, n = 6, 48
    x, w, parts = _parts(m, n, dtype, 3, seed=1)
    wide = torch.randn(m, 2 * n, device=DEVICE).to(dtype)
    parts[2] = wide[:, :n]  # row stride 2n
    dh = torch.randn(m, n, device=DEVICE).to(dtype)
    _, _, rstd = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, None, 1e-6, 0.0)
    want = BWD(_stored_sum(parts), dh, x, w, rstd, 0.0)
    got = BWD(parts[0], dh, x, w, rstd, 0.0, False, parts[1], parts[2])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda p: p[:, :-1], r"dy_b must have dy's shape"),
        (lambda p: p.double(), r"dy_b must have dy's shape .* dtype torch.float32"),
        (lambda p: p.to("meta"), r"dy_b must have dy's shape .* device"),
    ],
)
def test_bad_parts_are_refused_by_name_before_a_launch(change, match, monkeypatch):
    m, n = 4, 32
    x, w, (a, b) = _parts(m, n, torch.float32, 2)
    _, _, rstd = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, None, 1e-6, 0.0)
    launched = []
    monkeypatch.setattr(ops, "launch_backward", lambda *a, **k: launched.append(a))
    with pytest.raises(ContractValueError, match=match):
        BWD(a, None, x, w, rstd, 0.0, False, change(b))
    with pytest.raises(ContractValueError, match=r"dy_c needs dy_b"):
        BWD(a, None, x, w, rstd, 0.0, False, None, b)
    assert not launched


def test_widened_parts_round_the_sum_to_dy_dtype():
    """bfloat16 parts with ``dy_dtype=float32`` (autocast's widened GEMM outputs): the float32
    sum of their values, not rounded back to bfloat16."""
    m, n = 5, 40
    x, w, parts = _parts(m, n, torch.float32, 3, seed=2)
    _, _, rstd = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, None, 1e-6, 0.0)
    narrow = [p.bfloat16() for p in parts]
    want = BWD(_stored_sum([p.float() for p in narrow]), None, x, w, rstd, 0.0)
    got = BWD(narrow[0], None, x, w, rstd, 0.0, False, narrow[1], narrow[2], torch.float32)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    rounded = BWD(narrow[0], None, x, w, rstd, 0.0, False, narrow[1], narrow[2])
    assert not torch.equal(rounded[0], want[0])  # the default rounds to the parts' bfloat16


@pytest.mark.parametrize(
    ("parts", "dy_dtype", "match"),
    [
        (0, torch.float32, r"dy_dtype is the dtype of a sum: it needs dy_b"),
        (1, torch.float16, r"dy_dtype must be a dtype that dy's \(torch.bfloat16\) converts into"),
        (1, torch.float64, r"summed in x's accumulator, torch.float32"),
    ],
)
def test_bad_dy_dtype_is_refused_by_name(parts, dy_dtype, match):
    m, n = 4, 32
    x, w, dys = _parts(m, n, torch.bfloat16, 2)
    _, _, rstd = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, None, 1e-6, 0.0)
    extra = dys[1 : 1 + parts] + [None] * (2 - parts)
    with pytest.raises(ContractValueError, match=match):
        BWD(dys[0], None, x, w, rstd, 0.0, False, *extra, dy_dtype)


@pytest.mark.parametrize("kernel", ["one tile", "rows", "column tiles", "descriptors"])
@pytest.mark.parametrize("narrow", [torch.bfloat16, torch.float16])
def test_every_kernel_stores_the_dx_copy_as_its_cast(kernel, narrow):
    """``dx2_out``: every backward kernel also stores dx rounded to the narrow dtype, bit for bit
    ``dx.to(narrow)``, and dx and dweight stay as without it."""
    m, n = 11, 64
    x, w, (dy, dh) = _parts(m, n, torch.float32, 2, seed=3)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, torch.float32)
    cfg = _configs(m, n)[kernel]
    want = ops.launch_backward(dy, x, w, rstd, 0.0, dh, torch.float32, config=cfg)
    dx2 = torch.empty(m, n, device=DEVICE, dtype=narrow)
    got = ops.launch_backward(dy, x, w, rstd, 0.0, dh, torch.float32, config=cfg, dx2_out=dx2)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(dx2, want[0].to(narrow))


@pytest.mark.parametrize(
    ("x_dtype", "dx2_dtype"),
    [
        (torch.bfloat16, torch.float16),
        (torch.float32, torch.float32),
        (torch.float64, torch.float32),
    ],
)
def test_bad_dx2_dtype_is_refused_by_name(x_dtype, dx2_dtype):
    m, n = 4, 32
    x, w, (dy,) = _parts(m, n, x_dtype, 1)
    _, _, rstd = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, None, 1e-6, 0.0)
    with pytest.raises(ContractValueError, match=r"dx2_dtype must be float16 or bfloat16 beside"):
        BWD(dy, None, x, w, rstd, 0.0, False, None, None, None, dx2_dtype)

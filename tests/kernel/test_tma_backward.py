"""The tensor-descriptor (TMA) backward (``BackwardConfig.tma``, ``rmsnorm_backward_tma_kernel``):
every feature of the backward against the float64 oracle, beside the pointer kernel with the
same geometry, dweight bitwise repeatable; the config's rules and the tensors' alignment refused
by name before any output is written; the heuristic's choice (Hopper, measured widths, from
``TMA_MIN_M`` rows, aligned tensors only).

Triton's interpreter runs descriptors as strided loads, so the CPU cases check the indexing
(the 3-D row view, tiles past M, programs owning whole tiles); the GPU cases run TMA itself.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton
from kernel_helpers import (
    assert_close,
    assert_dweight_within_sum_bound,
    one_tile_backward_config,
    oracle,
    x_away_from_zero,
)

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, ops
from rmsnorm_kernel.contract import ContractValueError

DEVICE = "cuda" if rk.BACKEND == "cuda" else "cpu"
gpu = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)


def _tma_config(m, n, groups, rows, stages=2, tree=False, warps=4):
    rpp = triton.cdiv(triton.cdiv(m, groups), rows) * rows  # a multiple of rows
    return one_tile_backward_config(
        m, rpp, block=n, num_warps=warps, tree=tree, stages=stages, rows=rows, tma=True
    )


def _misaligned(t):
    """``t``'s values in a tensor one element into its storage (not 16-byte aligned)."""
    flat = torch.empty(t.numel() + 1, device=t.device, dtype=t.dtype)
    out = flat[1:].view(t.shape)
    out.copy_(t)
    return out


def _inputs(m, n, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = x_away_from_zero(gen, m, n).to(DEVICE, dtype)
    dy = torch.randn(m, n, generator=gen).to(DEVICE, dtype)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(DEVICE, dtype)
    return x, dy, w


@pytest.mark.parametrize(
    ("m", "n", "rows", "groups", "tree"),
    [
        (37, 512, 4, 5, False),  # the last tile of the last program runs past M
        (40, 16, 2, 3, True),  # the narrowest row a descriptor takes, the tree finish
        (9, 1024, 1, 4, False),  # rows wider than a box: (N / 256, 256) chunks
        (5, 64, 8, 1, False),  # one program, one tile larger than M
    ],
)
@pytest.mark.parametrize("features", ["weight", "none", "llama+dh", "offset"])
def test_tma_backward_matches_oracle_and_pointer_kernel(m, n, rows, groups, tree, features):
    dtype = torch.float32
    x, dy, w = _inputs(m, n, dtype)
    weight = None if features == "none" else w
    llama = features == "llama+dh"
    offset = 1.0 if features == "offset" else 0.0
    dh = torch.randn(m, n, device=DEVICE, dtype=dtype) if llama else None
    _, _, rstd = ops.launch_forward(x, weight, None, 1e-6, offset, dtype, llama=llama)
    cfg = _tma_config(m, n, groups, rows, tree=tree)
    dx, dw = ops.launch_backward(dy, x, weight, rstd, offset, dh, dtype, llama=llama, config=cfg)
    pointer = dataclasses.replace(cfg, tma=False)
    dx0, dw0 = ops.launch_backward(
        dy, x, weight, rstd, offset, dh, dtype, llama=llama, config=pointer
    )
    # The same math as the pointer kernel, but not always the same bits: the compiler may
    # contract multiplies and adds differently (Triton 3.9 did here, without a weight).
    _, _, dx_ref, dw_ref, _ = oracle(x, weight, dy, offset=offset)
    if dh is not None:
        dx_ref = dx_ref + dh.double()
    assert_close(dx, dx_ref, dtype, f"dx with {cfg}")
    assert_close(dx0, dx_ref, dtype, f"dx with {pointer}")
    if weight is None:
        assert dw is None and dw0 is None
        return
    dx1, dw1 = ops.launch_backward(dy, x, weight, rstd, offset, dh, dtype, llama=llama, config=cfg)
    assert torch.equal(dw1, dw) and torch.equal(dx1, dx)
    if llama:
        normed = (x.float() * rstd[:, None]).to(dtype).double()
        dw_ref = (dy.double() * normed).sum(0)
    for got, how in ((dw, cfg), (dw0, pointer)):
        assert_close(got, dw_ref, dtype, f"dweight with {how}")


def _strided_config(m, n, groups, rows, **fields):
    tiles = triton.cdiv(m, rows)
    return dataclasses.replace(
        _tma_config(m, n, groups, rows, **fields),
        groups=groups,
        rows_per_program=triton.cdiv(tiles, groups) * rows,
        strided=True,
    )


@pytest.mark.parametrize(
    ("m", "n", "rows", "groups", "tree"),
    [
        (37, 512, 4, 3, False),  # 10 tiles over 3 programs: 4, 3, 3; the last tile past M
        (40, 16, 2, 6, True),  # 20 tiles over 6 programs, the tree finish
        (9, 1024, 1, 9, False),  # one tile per program, rows wider than a box
        (5, 64, 8, 1, False),  # one program, one tile larger than M
        (70, 256, 16, 3, False),  # BWD_TMA's 256-column plan: 5 tiles of 16, the last 6 rows
        (101, 128, 32, 2, True),  # the 128-column plan: 4 tiles of 32, the last 5 rows
        (130, 64, 64, 2, False),  # the 64-column plan: 3 tiles, the last 2 rows
    ],
)
@pytest.mark.parametrize("features", ["weight", "llama+dh"])
def test_strided_tma_backward_matches_oracle_and_blocks(m, n, rows, groups, tree, features):
    """Row tiles dealt round robin (``strided``): dx as the block deal's bit for bit (the same
    per-row math), dweight against the oracle and bitwise repeatable."""
    dtype = torch.float32
    x, dy, w = _inputs(m, n, dtype, seed=1)
    llama = features == "llama+dh"
    dh = torch.randn(m, n, device=DEVICE, dtype=dtype) if llama else None
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype, llama=llama)
    cfg = _strided_config(m, n, groups, rows, tree=tree)
    run = lambda c: ops.launch_backward(dy, x, w, rstd, 0.0, dh, dtype, llama=llama, config=c)
    dx, dw = run(cfg)
    dx_blocks, _ = run(_tma_config(m, n, groups, rows, tree=tree))
    assert torch.equal(dx, dx_blocks)
    dx1, dw1 = run(cfg)
    assert torch.equal(dx1, dx) and torch.equal(dw1, dw)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    if llama:
        dx_ref = dx_ref + dh.double()
        dw_ref = (dy.double() * (x.float() * rstd[:, None]).to(dtype).double()).sum(0)
    assert_close(dx, dx_ref, dtype, f"dx with {cfg}")
    assert_close(dw, dw_ref, dtype, f"dweight with {cfg}")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(tma=False), r"strided needs tma"),
        (dict(groups=11), r"strided needs groups <= cdiv\(M, rows\)"),  # 10 tiles
        (dict(rows_per_program=12), r"rows_per_program == cdiv\(cdiv\(M, rows\), groups\)"),
    ],
)
def test_strided_config_rules_are_named(change, message, monkeypatch):
    m, n = 40, 64
    x, dy, w = _inputs(m, n, torch.float32)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    cfg = dataclasses.replace(_strided_config(m, n, 3, 4), **change)
    launched = []
    monkeypatch.setitem(vars(ops.BACKWARD_TMA), "launch", lambda *a, **k: launched.append(a))
    with pytest.raises(ContractValueError, match=message):
        ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)
    assert not launched


def test_tma_reads_row_strided_views():
    """Rows a padded row stride apart (16-byte aligned): read in place through the descriptor."""
    m, n = 12, 64
    base_x, base_dy, w = _inputs(m, n + 8, torch.float32)
    x, dy = base_x[:, :n], base_dy[:, :n]
    w = w[:n]
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    dx, dw = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=_tma_config(m, n, 3, 2))
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    assert_close(dx, dx_ref, torch.float32, "dx")
    assert_close(dw, dw_ref, torch.float32, "dweight")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(block=128), r"tma needs one_tile, block == N"),
        (dict(one_tile=False, rows=1), r"tma needs one_tile, block == N"),
        (dict(rows_per_program=6, groups=7), r"rows_per_program a multiple of rows"),
    ],
)
def test_tma_config_rules_are_named(change, message):
    m, n = 40, 64
    x, dy, w = _inputs(m, n, torch.float32)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    cfg = dataclasses.replace(_tma_config(m, n, 5, 4), **change)
    with pytest.raises(ContractValueError, match=message):
        ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)


def test_pipelined_tma_refuses_tiles_under_128_bytes(monkeypatch):
    """16 float16 columns a tile (32 bytes): on the H200 three stages faulted ("misaligned
    address", experiments/h200/tma_hunt.py); refused by name before a launch. One stage runs."""
    m, n = 8, 16
    x, dy, w = _inputs(m, n, torch.float16)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    launched = []
    with monkeypatch.context() as patched:
        patched.setitem(vars(ops.BACKWARD_TMA), "launch", lambda *a, **k: launched.append(a))
        with pytest.raises(ContractValueError, match=r"stages > 1 needs tiles of at least 128"):
            cfg = _tma_config(m, n, 2, 1, stages=3)
            ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)
    assert not launched
    dx, dw = ops.launch_backward(
        dy, x, w, rstd, 0.0, None, x.dtype, config=_tma_config(m, n, 2, 1, stages=1)
    )
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    assert_close(dx, dx_ref, torch.float16, "dx")
    assert_close(dw, dw_ref, torch.float16, "dweight")


def test_tma_refuses_misaligned_rows_before_any_output(monkeypatch):
    """x one element into its storage: not 16-byte aligned. Refused by name before a launch."""
    m, n = 8, 64
    x, dy, w = _inputs(m, n, torch.float32)
    x = _misaligned(x)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    launched = []
    monkeypatch.setitem(vars(ops.BACKWARD_TMA), "launch", lambda *a, **k: launched.append(a))
    with pytest.raises(ContractValueError, match=r"16-byte aligned data and row strides"):
        ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=_tma_config(m, n, 2, 2))
    assert not launched


@pytest.mark.parametrize("float64", [False, True])
def test_float64_rows_never_take_tma(float64):
    """float64 math keeps pointers: descriptors move 16-bit and float32 values only."""
    cfg = config.backward_config(65536, 1024, None, float64, itemsize=2, tma=True)
    assert not cfg.tma


def test_heuristic_picks_tma_only_where_measured(monkeypatch):
    monkeypatch.setattr(config, "sm_count", lambda index: 132)
    config.backward_config.cache_clear()
    try:
        for (n, itemsize), (rows, per_sm, stages, warps) in config.BWD_TMA.items():
            first, stride_per_sm, stride_stages = config.BWD_TMA_STRIDED.get(
                (n, itemsize), (None, None, None)
            )
            least = config.tma_from(n, itemsize)
            assert least >= config.TMA_MIN_M
            for m in (least, least * 4 + 3, 1 << 20):
                cfg = config.backward_config(m, n, 0, itemsize=itemsize, tma=True)
                strided = first is not None and m >= first
                assert cfg.tma and cfg.block == n and cfg.rows == rows and cfg.strided == strided
                assert cfg.num_warps == warps and not cfg.tree
                assert cfg.stages == (stride_stages if strided else stages)
                assert cfg.groups <= 132 * (stride_per_sm if strided else per_sm)
                assert cfg.rows_per_program % rows == 0
                cfg.check(m, n)
            # not below the width's fewest rows, nor when the caller found the tensors unfit
            assert not config.backward_config(least - 1, n, 0, itemsize=itemsize, tma=True).tma
            assert not config.backward_config(least * 4, n, 0, itemsize=itemsize).tma
        assert not config.backward_config(65536, 2048, 0, itemsize=2, tma=True).tma  # not measured
        assert config.tma_from(2048, 2) is None and config.tma_from(256, 4) is None
    finally:
        config.backward_config.cache_clear()


@gpu
@pytest.mark.parametrize(
    ("m", "n", "dtype"),
    [
        (65536, 1024, torch.bfloat16),
        (16384, 4096, torch.float32),
        (16384, 1024, torch.float32),
        (16384, 2048, torch.float32),
        (8192, 4096, torch.bfloat16),
        (4096, 8192, torch.bfloat16),
        (65539, 1024, torch.bfloat16),  # strided: 32770 tiles of 2 rows, the last one past M
        (16387, 512, torch.float16),  # strided from 16384 rows, 4 rows a tile
        (4099, 512, torch.bfloat16),  # blocks: under BWD_TMA_STRIDED's 16384 rows
        (262147, 256, torch.bfloat16),  # strided, 16 rows a tile, the last one 3 rows
        (4101, 512, torch.float32),  # strided from 4096 rows at this width
        (16383, 256, torch.float16),  # blocks: one row under BWD_TMA_STRIDED's 16384
        (524291, 128, torch.bfloat16),  # q/k norms: strided, 32 rows a tile, the last 3 rows
        (4099, 64, torch.bfloat16),
        (4099, 128, torch.float32),  # float32 q/k norms: strided, 16 rows a tile, the last 3
        (65541, 64, torch.float32),  # strided, 8 rows a tile, the last 5 rows
    ],
)
def test_hopper_heuristic_runs_tma_and_matches_oracle(m, n, dtype):
    """On a GPU with TMA the measured shapes take the descriptor kernel (from the width's fewest
    rows); elsewhere the pointer kernel. Either way dx matches the oracle and dweight, a sum
    over M rows accumulated in float32, is within the bound of any float32 summation order (as
    test_gpu's many-rows test), and repeats bit for bit."""
    x, dy, w = _inputs(m, n, dtype)
    x, w = x.requires_grad_(), w.requires_grad_()
    before = dict(ops.BACKWARD_TMA.launches)
    rk.rmsnorm(x, w, 1e-6).backward(dy)
    ran = sum(ops.BACKWARD_TMA.launches.values()) - sum(before.values())
    least = config.tma_from(n, dtype.itemsize)
    assert ran == (1 if config.hopper(x.device.index) and m >= least else 0)
    dx1, dw1 = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    rk.rmsnorm(x, w, 1e-6).backward(dy)
    assert torch.equal(x.grad, dx1) and torch.equal(w.grad, dw1)
    _, _, dx_ref, _, _ = oracle(x, w, dy)
    assert_close(x.grad, dx_ref, dtype, "dx")
    assert_dweight_within_sum_bound(w.grad, x, dy)


@gpu
def test_misaligned_rows_take_the_pointer_kernel_on_gpu():
    """The heuristic checks alignment: a tensor one element into its storage takes the pointer
    kernel (a choice of kernel: same results, same contract)."""
    m, n = 65536, 1024
    x, dy, w = _inputs(m, n, torch.bfloat16)
    x, w = _misaligned(x).requires_grad_(), w.requires_grad_()
    before = sum(ops.BACKWARD_TMA.launches.values())
    rk.rmsnorm(x, w, 1e-6).backward(dy)
    assert sum(ops.BACKWARD_TMA.launches.values()) == before
    _, _, dx_ref, _, _ = oracle(x, w, dy)
    assert_close(x.grad, dx_ref, torch.bfloat16, "dx")
    assert_dweight_within_sum_bound(w.grad, x, dy)


def test_tma_takes_dy_in_another_dtype():
    """dy in float32 with float16 x (an upstream that keeps float32 gradients): each tensor has
    its own descriptor dtype; dx comes back in x's dtype."""
    m, n = 20, 256
    x, dy, w = _inputs(m, n, torch.float32)
    x = x.to(torch.float16)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    dx, dw = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=_tma_config(m, n, 3, 2))
    assert dx.dtype == torch.float16 and dw.dtype == torch.float32
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    assert_close(dx, dx_ref, torch.float16, "dx")
    assert_close(dw, dw_ref, torch.float16, "dweight")


def test_tma_refuses_overlapping_rows_by_name():
    """An expanded gradient (``(y * v).sum()`` gives dy = v over every row: row stride 0) is read
    by the pointer kernels; an explicit TMA config is refused before any launch."""
    m, n = 8, 64
    x, _, w = _inputs(m, n, torch.float32)
    dy = torch.randn(n, device=DEVICE).expand(m, n)
    dy_rows, sdy = ops.rows_of(dy, "dy")
    assert sdy == 0
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    with pytest.raises(ContractValueError, match=r"rows not overlapping"):
        ops.launch_backward(
            dy_rows, x, w, rstd, 0.0, None, x.dtype, stride_dy=sdy, config=_tma_config(m, n, 2, 2)
        )


@gpu
def test_expanded_gradient_takes_the_pointer_kernel_on_gpu(monkeypatch):
    m, n = 8192, 1024
    x, _, w = _inputs(m, n, torch.bfloat16)
    x, w = x.requires_grad_(), w.requires_grad_()
    dy = torch.randn(n, device=DEVICE, dtype=torch.bfloat16).expand(m, n)
    strides = []
    launch = ops.launch_backward

    def spy(*args, **kwargs):
        strides.append(kwargs.get("stride_dy"))
        return launch(*args, **kwargs)

    monkeypatch.setattr(ops, "launch_backward", spy)
    before = sum(ops.BACKWARD_TMA.launches.values())
    rk.rmsnorm(x, w, 1e-6).backward(dy)
    assert strides == [0], "this test is about a gradient whose rows overlap"
    assert sum(ops.BACKWARD_TMA.launches.values()) == before
    _, _, dx_ref, _, _ = oracle(x, w, dy)
    assert_close(x.grad, dx_ref, torch.bfloat16, "dx")
    assert_dweight_within_sum_bound(w.grad, x, dy)


def test_tma_backward_leaves_copy_on_write_inputs_lazy():
    """Lazily cloned x, dy and weight stay lazy through the descriptor kernel (Triton's launcher
    reads a descriptor's base with ``data_ptr()``, which copies a COW tensor's storage), with
    the same bits as the tensors themselves."""
    m, n = 37, 512
    x, dy, w = _inputs(m, n, torch.float32)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    cfg = _tma_config(m, n, 5, 4)
    expected = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)
    lazy = [torch._lazy_clone(t) for t in (dy, x, w)]
    got = ops.launch_backward(*lazy, rstd, 0.0, None, x.dtype, config=cfg)
    assert [torch._C._is_cow_tensor(t) for t in lazy] == [True] * 3
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


@pytest.mark.parametrize(("n", "rows"), [(512, 4), (64, 8), (1024, 1)])
def test_row_descriptors_after_the_first_equal_the_constructors(n, rows, monkeypatch):
    """``ops._rows_desc`` builds the first descriptor of each (dtype, N, rows) with Triton's
    constructor and copies its fields for later ones: every field of a copy (another base, M and
    row stride; a lazily cloned base swapped for a snapshot) equals what the constructor makes."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    monkeypatch.setattr(ops, "_DESC_FIELDS", {})
    chunk = min(n, ops.TMA_CHUNK)
    a = torch.zeros(3, n, device=DEVICE, dtype=torch.bfloat16)
    first = ops._rows_desc(a, 3, n, rows)
    assert list(ops._DESC_FIELDS) == [(torch.bfloat16, n, rows)]
    wide = torch.randn(7, 2 * n, device=DEVICE, dtype=torch.bfloat16)
    for base in (wide[:, :n], torch._lazy_clone(wide)[:, :n]):
        got = ops._rows_desc(base, 7, 2 * n, rows)
        assert type(got) is TensorDescriptor
        want = TensorDescriptor(
            got.base, [7, n // chunk, chunk], [2 * n, chunk, 1], [rows, n // chunk, chunk]
        )
        assert vars(got).keys() == vars(want).keys() == vars(first).keys()
        assert {k: v for k, v in vars(got).items() if k != "base"} == {
            k: v for k, v in vars(want).items() if k != "base"
        }
        assert torch.equal(got.base, base) and not torch._C._is_cow_tensor(got.base)
        assert got.block_shape is not first.block_shape  # no list shared between descriptors
    # another dtype is another key: its first descriptor goes through the constructor's checks
    with pytest.raises(AssertionError, match="16-byte aligned"):
        ops._rows_desc(torch.zeros(4, n + 1, device=DEVICE)[:, 1:], 4, n + 1, rows)


def test_row_descriptors_come_from_the_constructor_where_a_field_is_unknown(monkeypatch):
    """A Triton whose descriptors carry a field ``_rows_desc`` does not know (it might be derived
    from the base) gets every descriptor from the constructor, never a copy."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    made = []

    class Counted(TensorDescriptor):
        def __post_init__(self):
            super().__post_init__()
            self.base_address = self.base.data_ptr()  # a field derived from the base
            made.append(self)

    monkeypatch.setattr(ops, "TensorDescriptor", Counted)
    monkeypatch.setattr(ops, "_DESC_FIELDS", {})
    bases = [torch.randn(5, 512, device=DEVICE, dtype=torch.bfloat16) for _ in range(3)]
    descs = [ops._rows_desc(b, 5, 512, 4) for b in bases]
    assert made == descs and ops._DESC_FIELDS == {(torch.bfloat16, 512, 4): None}
    assert [d.base_address for d in descs] == [b.data_ptr() for b in bases]

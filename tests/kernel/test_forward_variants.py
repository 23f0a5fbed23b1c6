"""The one-row forward's packed and unmasked passes (``ForwardConfig.packed`` / ``.unmasked``)
against the float64 oracle, and bit for bit against the plain one pass: they change how a row
sits in registers and whether lanes are masked, never a value.

CPU cases use narrow rows (the interpreter runs the same kernel code); the widths the heuristic
gives these passes (config.PACKED_FORWARD) run on the GPU.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from kernel_helpers import assert_close, oracle_y

from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig
from rmsnorm_kernel.contract import ContractValueError

BF16 = torch.bfloat16


def _launch(x, w, cfg, *, offset=0.0, residual=None, llama=False, out_dtype=None):
    return ops.launch_forward(
        x, w, residual, 1e-6, offset, out_dtype or x.dtype, llama=llama, config=cfg
    )


def _bits_equal(a, b, what):
    assert a.dtype == b.dtype, what
    same = (a.view(torch.int16) if a.element_size() == 2 else a.view(torch.int32)) == (
        b.view(torch.int16) if b.element_size() == 2 else b.view(torch.int32)
    )
    assert bool(same.all()), f"{what}: {int((~same).sum())} values differ in their bits"


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
@pytest.mark.parametrize("n", [256, 300])
@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize("with_weight", [True, False])
def test_packed_pass_matches_the_oracle_and_the_plain_pass(device, dtype, n, offset, with_weight):
    block = 512
    x = torch.randn(6, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype) if with_weight else None
    plain = ForwardConfig(block, 0, 4)
    packed = dataclasses.replace(plain, packed=True)
    y, _, rstd = _launch(x, w, packed, offset=offset)
    assert_close(y, oracle_y(x, w, offset=offset), dtype, f"y with {packed}")
    y0, _, rstd0 = _launch(x, w, plain, offset=offset)
    _bits_equal(y, y0, "packed vs plain y")
    _bits_equal(rstd, rstd0, "packed vs plain rstd")


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_packed_pass_widens_every_bit_pattern_exactly(device, dtype):
    """Subnormals, signed zeros, inf and NaN come out of the bit widening as out of a cast."""
    n = 512
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    x = bits.view(dtype).reshape(-1, n).to(device)
    finite = torch.isfinite(x.float()).all(-1)
    w = torch.ones(n, device=device, dtype=dtype)
    # Rows with inf / NaN are NaN throughout in both; the finite ones carry the extreme values.
    cfg = ForwardConfig(n, 0, 4)
    for llama in (False, True):
        y, _, rstd = _launch(x, w, dataclasses.replace(cfg, packed=True), llama=llama)
        y0, _, rstd0 = _launch(x, w, cfg, llama=llama)
        _bits_equal(y, y0, f"packed vs plain y, llama={llama}")
        _bits_equal(rstd, rstd0, f"packed vs plain rstd, llama={llama}")
    assert int(finite.sum()) > 0


def test_packed_pass_with_every_feature(device):
    """Residual (h written and normalised), Llama's rounding, a strided weight view, rows with a
    stride, a float32 output: each against the oracle and bit for bit against the plain pass."""
    m, n = 5, 200
    cfg = ForwardConfig(256, 0, 4)
    packed = dataclasses.replace(cfg, packed=True)
    base = torch.randn(m, 2 * n, device=device).to(BF16)
    x = base[:, :n]  # rows 2n apart
    w_store = (1 + 0.5 * torch.randn(3 * n, device=device)).to(BF16)
    w = w_store[::3]  # a weight view with stride 3
    res = torch.randn(m, n, device=device).to(BF16)
    kw = dict(offset=1.0, residual=res, llama=True)
    y, h, rstd = ops.launch_forward(
        x, w, res, 1e-6, 1.0, BF16, stride_x=x.stride(0), llama=True, config=packed
    )
    y0, h0, rstd0 = ops.launch_forward(
        x, w, res, 1e-6, 1.0, BF16, stride_x=x.stride(0), llama=True, config=cfg
    )
    for a, b, what in ((y, y0, "y"), (h, h0, "h"), (rstd, rstd0, "rstd")):
        _bits_equal(a, b, f"packed vs plain {what} ({kw})")
    _bits_equal(h, (x.float() + res.float()).to(BF16), "h = x + residual, rounded once")
    y32, _, _ = _launch(x.contiguous(), w, packed, out_dtype=torch.float32)
    assert y32.dtype == torch.float32
    assert_close(y32, oracle_y(x, w), torch.float32, "float32 output of bfloat16 rows")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, BF16, torch.float64])
@pytest.mark.parametrize("offset", [0.0, 0.5])
def test_unmasked_pass_matches_the_oracle_and_the_masked_pass(device, dtype, offset):
    m, n = 7, 256
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    cfg = ForwardConfig(n, 0, 4)
    y, _, rstd = _launch(x, w, dataclasses.replace(cfg, unmasked=True), offset=offset)
    assert_close(y, oracle_y(x, w, offset=offset), dtype, "y unmasked")
    y0, _, rstd0 = _launch(x, w, cfg, offset=offset)
    assert torch.equal(y, y0) and torch.equal(rstd, rstd0)
    res = torch.randn(m, n, device=device).to(dtype)
    y1, h1, _ = _launch(x, w, dataclasses.replace(cfg, unmasked=True), residual=res)
    y2, h2, _ = _launch(x, w, cfg, residual=res)
    assert torch.equal(y1, y2) and torch.equal(h1, h2)


_EVICT_CASES = [
    (256, ForwardConfig(256, 0, 4, unmasked=True)),  # one pass, unmasked
    (300, ForwardConfig(512, 0, 4)),  # one pass, masked
    (300, ForwardConfig(512, 4, 4)),  # several rows per program
    (300, ForwardConfig(128, 0, 4)),  # chunked: the row read twice
]


@pytest.mark.parametrize(
    "n,cfg,with_residual",
    [(n, cfg, res) for n, cfg in _EVICT_CASES for res in (False, True)]
    + [(256, ForwardConfig(256, 0, 4, packed=True), False)],  # packed: never with a residual
)
def test_evict_last_is_a_hint_that_changes_no_bit(device, n, cfg, with_residual):
    """``ForwardConfig.evict_last`` only marks the row's load: every path gives the bits it gives
    without it, and the oracle's values."""
    dtype = BF16
    x = torch.randn(5, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    res = torch.randn(5, n, device=device).to(dtype) if with_residual else None
    hinted = dataclasses.replace(cfg, evict_last=True)
    y, h, rstd = _launch(x, w, hinted, residual=res)
    y0, h0, rstd0 = _launch(x, w, cfg, residual=res)
    _bits_equal(y, y0, f"{hinted} vs {cfg}")
    _bits_equal(rstd, rstd0, f"rstd of {hinted} vs {cfg}")
    if with_residual:
        _bits_equal(h, h0, f"h of {hinted} vs {cfg}")
    else:
        assert_close(y, oracle_y(x, w), dtype, f"y with {hinted}")


@pytest.mark.parametrize("dtype", [BF16, torch.float32, torch.float64])
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("llama", [False, True])
def test_stream_is_a_hint_that_changes_no_bit(device, dtype, with_residual, llama):
    """``ForwardConfig.stream`` only marks the chunked pass's second reads and its stores, and
    ``stages`` only pipelines that pass: the bits without them (evict_last on the first pass or
    not, a residual's h re-read in pass 2, Llama's rounding, an offset, a strided weight), and
    the oracle's values. On the GPU also at a width the heuristic walks in chunks."""
    wide = device == "cuda"
    m, n, block = (3, 131072 + 77, 16384) if wide else (5, 300, 128)
    if wide and dtype == torch.float64:
        block = 8192  # a pipelined chunk of x and of w, 64 KiB each, in shared memory
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(2 * n, device=device)).to(dtype)[::2]
    res = torch.randn(m, n, device=device).to(dtype) if with_residual else None
    for cfg in (ForwardConfig(block, 0, 4), ForwardConfig(block, 0, 4, evict_last=True)):
        y0, h0, rstd0 = _launch(x, w, cfg, residual=res, llama=llama, offset=0.5)
        # (2 stages: one chunk of x and one of w in flight, at most 128 KiB of shared memory)
        for change in (dict(stream=True), dict(stages=2), dict(stream=True, stages=2)):
            hinted = dataclasses.replace(cfg, **change)
            y, h, rstd = _launch(x, w, hinted, residual=res, llama=llama, offset=0.5)
            assert torch.equal(y, y0) and torch.equal(rstd, rstd0), hinted
            if with_residual:
                assert torch.equal(h, h0), hinted
    if not (with_residual or llama):
        assert_close(y, oracle_y(x, w, offset=0.5), dtype, f"y with {hinted}")


def test_stream_config_is_checked_before_any_output(device):
    x = torch.randn(4, 300, device=device)
    for cfg in (ForwardConfig(512, 0, 4, stream=True), ForwardConfig(512, 2, 4, stream=True)):
        with pytest.raises(ContractValueError, match="ForwardConfig.stream hints the second pass"):
            _launch(x, None, cfg)
    for cfg in (ForwardConfig(512, 0, 4, stages=2), ForwardConfig(512, 2, 4, stages=3)):
        with pytest.raises(ContractValueError, match="ForwardConfig.stages pipelines the second"):
            _launch(x, None, cfg)
    with pytest.raises(ContractValueError, match=r"ForwardConfig.stages must be >= 1 \(got 0\)"):
        _launch(x, None, ForwardConfig(128, 0, 4, stages=0))
    # 2 chunks of 16384 float32 values of x and of w in flight: 256 KiB, over any GPU's 227 KiB
    wide = torch.randn(2, 20000, device=device)
    w = torch.randn(20000, device=device)
    with pytest.raises(ContractValueError, match="ForwardConfig.stages keeps stages - 1 chunks"):
        _launch(wide, w, ForwardConfig(16384, 0, 4, stages=3))
    y, _, _ = _launch(wide, None, ForwardConfig(16384, 0, 4, stages=3))  # x alone: 128 KiB
    assert torch.equal(y, _launch(wide, None, ForwardConfig(16384, 0, 4))[0])


def test_zero_offset_keeps_the_sign_of_a_zero_weight(device):
    """With offset 0 the weight multiplies as F.rms_norm's does: a -0.0 weight gives a signed
    zero like x * r * w (adding +0.0 first would turn it into +0.0)."""
    x = torch.ones(2, 64, device=device)
    w = torch.full((64,), -0.0, device=device)
    y, _, _ = _launch(x, w, ForwardConfig(64, 0, 4))
    expected = torch.nn.functional.rms_norm(x, (64,), w, 1e-6)
    assert torch.equal(torch.signbit(y), torch.signbit(expected))


def test_packed_and_unmasked_configs_are_checked_before_any_output(device):
    x = torch.randn(4, 300, device=device)
    with pytest.raises(ContractValueError, match="ForwardConfig.packed keeps 16-bit rows"):
        _launch(x, None, ForwardConfig(512, 0, 4, packed=True))
    xb = x.to(BF16)
    with pytest.raises(ContractValueError, match="ForwardConfig.packed needs one whole row"):
        _launch(xb, None, ForwardConfig(256, 0, 4, packed=True))
    with pytest.raises(ContractValueError, match="ForwardConfig.packed needs one whole row"):
        _launch(xb, None, ForwardConfig(512, 1, 4, packed=True))
    with pytest.raises(ContractValueError, match="ForwardConfig.unmasked needs one row"):
        _launch(x, None, ForwardConfig(512, 0, 4, unmasked=True))
    with pytest.raises(ContractValueError, match="ForwardConfig.unmasked needs one row"):
        _launch(x[:, :256], None, ForwardConfig(256, 1, 4, unmasked=True))


def test_the_heuristic_packs_16_bit_rows_of_the_measured_widths():
    assert set(config.PACKED_FORWARD) == {BF16, torch.float16}
    for dtype, widths in config.PACKED_FORWARD.items():
        for n, (warps, free) in widths.items():
            cfg = config.forward_config(1024, n, None, packable=dtype)
            assert cfg == ForwardConfig(n, 0, warps, packed=True, unmasked=free)
            cfg.check(n)
            assert not config.forward_config(1024, n, None).packed  # float32, or a residual
    assert config.PACKED_FORWARD[BF16][65536] == (32, True)  # 262.2 us against 359.3 chunked
    assert not config.forward_config(1024, 40000, None, packable=BF16).packed  # padded block
    assert not config.forward_config(1024, 16384, None, packable=BF16).packed
    assert not config.forward_config(1024, 131072, None, packable=BF16).packed


def test_the_heuristic_unmasks_rows_exactly_one_block_wide_at_small_m():
    small = config.UNMASKED_MAX_ROWS
    assert config.forward_config(small, 4096, None).unmasked
    assert config.forward_config(1024, 8192, None).unmasked
    assert not config.forward_config(small + 1, 4096, None).unmasked
    assert not config.forward_config(1024, 4000, None).unmasked  # masked lanes in the block
    assert config.forward_config(1024, 512, None).rows  # short rows: the several-rows kernel


@pytest.mark.parametrize("residual", [False, True])
def test_launch_forward_routes_bfloat16_rows_to_the_packed_pass(device, monkeypatch, residual):
    """The launcher offers the packed pass 16-bit rows without a residual only, the evict_last
    rule the row's bytes without a residual only, the short-row tile x's value size, and the
    cluster rule x's dtype and whether a residual is added (CLUSTER_FORWARD's key)."""
    seen = []
    real = config.forward_config

    def spy(m, n, index, float64=False, packable=None, row_bytes=0, itemsize=2, res=False, dt=None):
        seen.append((packable, row_bytes, itemsize, res, dt))
        return real(m, n, index, float64, packable, row_bytes, itemsize, res, dt)

    monkeypatch.setattr(ops, "forward_config", spy)
    x = torch.randn(2, 64, device=device)
    res = torch.randn(2, 64, device=device)
    half = (torch.float16, BF16)
    for dtype in (*half, torch.float32):
        expected = dtype if dtype in half and not residual else None
        row_bytes = 0 if residual else 64 * dtype.itemsize
        seen.clear()
        ops.launch_forward(x.to(dtype), None, res.to(dtype) if residual else None, 1e-6, 0.0, dtype)
        assert seen == [(expected, row_bytes, dtype.itemsize, residual, dtype)], dtype


def test_the_heuristic_hints_evict_last_on_rows_of_the_measured_bytes(monkeypatch):
    """EVICT_LAST_ROW_BYTES: the hint from 16 KiB to 256 KiB rows, one row per program; 8192-wide
    blocks take 8 warps with it; never for the several-rows kernel, nor without row bytes."""
    monkeypatch.setattr(config, "sm_count", lambda index: 132)
    monkeypatch.setattr(config, "clusters_here", lambda index: False)
    config.forward_config.cache_clear()
    try:
        lo, hi = config.EVICT_LAST_ROW_BYTES
        cfg = config.forward_config(32768, 8192, 0, False, BF16, 8192 * 2)
        assert cfg.evict_last and cfg.num_warps == 8 and cfg.rows == 0
        assert config.forward_config(16384, 4096, 0, False, None, 4096 * 4).evict_last
        assert not config.forward_config(16384, 4096, 0, False, BF16, 4096 * 2).evict_last
        assert not config.forward_config(32768, 8192, 0, False, None, 0).evict_last  # a residual
        assert config.forward_config(32768, 8192, 0).num_warps == 4
        wide = config.forward_config(4096, 65536, 0, False, None, 65536 * 4)
        assert wide.evict_last and wide.block < 65536  # the chunked pass, at hi
        assert hi == 65536 * 4 and lo == 8192 * 2
        assert not config.forward_config(256, 262144, 0, False, BF16, 262144 * 2).evict_last
        assert not config.forward_config(65536, 1024, 0, False, BF16, 1024 * 2).evict_last
        short = config.forward_config(65536, 1024, 0, False, None, lo)  # several rows: never
        assert short.rows > 0 and not short.evict_last
    finally:
        config.forward_config.cache_clear()


def test_few_rows_of_16384_columns_take_more_warps_instead_of_the_hint(monkeypatch):
    """FEW_ROWS_FORWARD: up to 2048 16-bit rows of 16384 columns (one pass, one row a program)
    take 32 warps without the hint; from 2049 rows the hint at the block's 8 warps. Float32 rows
    of 16384 (another key), 8192 columns and rows without row bytes (a residual) are not taken."""
    monkeypatch.setattr(config, "sm_count", lambda index: 132)
    monkeypatch.setattr(config, "clusters_here", lambda index: False)
    config.forward_config.cache_clear()
    try:
        most, warps = config.FEW_ROWS_FORWARD[(16384, 2)]
        few = config.forward_config(most, 16384, 0, False, None, 16384 * 2, 2)
        assert (few.num_warps, few.evict_last, few.rows, few.block) == (warps, False, 0, 16384)
        many = config.forward_config(most + 1, 16384, 0, False, None, 16384 * 2, 2)
        assert (many.num_warps, many.evict_last) == (8, True)
        ragged = config.forward_config(3, 12000, 0, False, None, 12000 * 2, 2)
        assert (ragged.num_warps, ragged.evict_last, ragged.unmasked) == (warps, False, False)
        f32 = config.forward_config(most, 16384, 0, False, None, 16384 * 4, 4)
        assert (f32.num_warps, f32.evict_last) == (8, True)
        narrow = config.forward_config(512, 8192, 0, False, BF16, 8192 * 2, 2)
        assert (narrow.num_warps, narrow.evict_last) == (8, True)
        residual = config.forward_config(512, 16384, 0, False, None, 0, 2, residual=True)
        assert (residual.num_warps, residual.evict_last) == (8, False)
    finally:
        config.forward_config.cache_clear()


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype,n", [(d, n) for d, widths in config.PACKED_FORWARD.items() for n in sorted(widths)]
)
@pytest.mark.parametrize("llama", [False, True])
def test_packed_pass_at_its_widths_on_the_gpu(dtype, n, llama):
    """The widths the heuristic packs, compiled, masked and not: the oracle, and the bits of the
    plain one pass at the same warps (the same reduction order)."""
    x = torch.randn(37, n, device="cuda").to(dtype)
    w = (1 + 0.5 * torch.randn(n, device="cuda")).to(dtype)
    warps, _ = config.PACKED_FORWARD[dtype][n]
    assert config.forward_config(37, n, 0, packable=dtype).packed
    for free, offset in ((False, 0.0), (True, 0.0), (True, 1.0)):
        cfg = ForwardConfig(n, 0, warps, packed=True, unmasked=free)
        y, _, rstd = _launch(x, w, cfg, offset=offset, llama=llama)
        if not llama:
            assert_close(y, oracle_y(x, w, offset=offset), dtype, f"y with {cfg}")
        plain = dataclasses.replace(cfg, packed=False, unmasked=False)
        y0, _, rstd0 = _launch(x, w, plain, offset=offset, llama=llama)
        _bits_equal(y, y0, f"{cfg} vs {plain}")
        _bits_equal(rstd, rstd0, f"rstd of {cfg} vs {plain}")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "n,dtype",
    [
        (1024, BF16),
        (4096, torch.float32),
        (8192, BF16),
        (16384, BF16),
        (65536, BF16),
        (262144, BF16),
    ],
)
def test_evict_last_changes_no_bit_at_the_heuristics_widths_on_the_gpu(n, dtype):
    """The heuristic's config at widths of each path (several rows, one pass, packed, chunked),
    compiled, with the hint switched: the same bits."""
    x = torch.randn(40, n, device="cuda").to(dtype)
    w = (1 + 0.5 * torch.randn(n, device="cuda")).to(dtype)
    cfg = config.forward_config(40, n, 0, packable=dtype if dtype == BF16 else None)
    if cfg.split:  # the split-row kernel takes no hint: the chunked walk it replaced there
        cfg = ForwardConfig(config.LOOP_BLOCK, 0, config.LOOP_WARPS)
    flipped = dataclasses.replace(cfg, evict_last=not cfg.evict_last)
    y, _, rstd = _launch(x, w, cfg)
    y0, _, rstd0 = _launch(x, w, flipped)
    _bits_equal(y, y0, f"{cfg} vs {flipped}")
    _bits_equal(rstd, rstd0, f"rstd of {cfg} vs {flipped}")
    assert_close(y, oracle_y(x, w), dtype, f"y with {cfg}")

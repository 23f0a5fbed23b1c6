"""The launch heuristics' choices, on CPU: the measured geometry per shape (config.py says what
was measured), with the H200's 132 SMs standing in for a GPU. The kernels themselves run every
config these produce in tests/kernel/test_gpu.py on the GPU."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rmsnorm_kernel import config

BF16 = torch.bfloat16

H200_SMS = 132


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(config, "sm_count", lambda index: H200_SMS)
    monkeypatch.setattr(config, "hopper", lambda index: True)
    config.backward_config.cache_clear()
    config.forward_config.cache_clear()
    yield
    config.backward_config.cache_clear()
    config.forward_config.cache_clear()


@pytest.mark.parametrize(
    "m,groups,rows,stages",
    [
        (256, 64, 4, 3),  # small M: >= 4 rows per program, pipelined (8.2 us vs 8.5)
        (1024, 128, 8, 3),  # 13.2 us vs 14.7 with 256 programs and no pipelining
        (2048, 128, 16, 3),  # 22.8 us vs 25.5
        (4096, 256, 16, 3),  # 2 programs per SM, pipelined: 35.8 us vs 46.7
        (16384, 261, 63, 3),
    ],
)
def test_4096_columns_use_the_sum_finish_with_the_measured_grid(h200, m, groups, rows, stages):
    cfg = config.backward_config(m, 4096, 0)
    assert (cfg.groups, cfg.rows_per_program, cfg.stages) == (groups, rows, stages)
    assert not cfg.tree
    assert cfg.dw_float64 == (m * 4096 <= config.F64_ROWS_MAX_ELEMS)
    cfg.check(m, 4096)


def test_narrow_rows_keep_the_in_launch_tree_past_small_m(h200):
    for m, n, per_sm, stages, tile in (
        (262144, 256, 4, 3, 4),  # 4 rows per step: 122.9 us vs 159.0 one row (part rowsbwd)
        (131072, 512, 8, 3, 4),  # 122.9 vs 126.8
        (65536, 1024, 4, 4, 1),  # one row per step, 4 stages (part pipe)
    ):
        cfg = config.backward_config(m, n, 0)
        assert cfg.tree and cfg.dw_float64
        rows = -(-m // (per_sm * H200_SMS))  # per_sm programs per SM, none without rows
        assert (cfg.rows_per_program, cfg.stages, cfg.rows) == (rows, stages, tile)
        assert cfg.fanout == config.TREE_FANOUT == 8  # 129.3 us vs 140.9 binary at 65536 x 1024
        cfg.check(m, n)


@pytest.mark.parametrize(
    "m,n,groups,stages",
    [
        (128, 257, 32, 1),  # 4.9 us vs 12.9 with the tree; no pipelining below 1024 columns
        (256, 1024, 64, 3),  # 5.6 us vs 17.7
        (1024, 1024, 128, 3),  # 8.5 us vs 38.2
        (2048, 1024, 128, 3),
        (8, 256, 2, 1),
        (1, 64, 1, 1),
    ],
)
def test_small_m_takes_the_sum_finish_even_for_narrow_rows(h200, m, n, groups, stages):
    cfg = config.backward_config(m, n, 0)
    assert not cfg.tree
    assert (cfg.groups, cfg.stages) == (groups, stages)
    assert cfg.rows_per_program >= min(m, config.SMALL_ROWS_PER_PROGRAM)
    cfg.check(m, n)


def test_float32_rows_at_4096_columns_take_the_measured_stage_count(h200):
    assert config.backward_config(16384, 4096, 0, itemsize=4).stages == 2  # 218.0 vs 225.3 us
    assert config.backward_config(16384, 4096, 0, itemsize=2).stages == 3


def test_float64_math_is_never_pipelined(h200):
    cfg = config.backward_config(16384, 4096, 0, float64=True)
    assert cfg.stages == 1 and cfg.dw_float64
    cfg = config.backward_config(262144, 256, 0, float64=True)
    assert (cfg.stages, cfg.rows) == (1, 1)


def test_several_rows_per_step_only_where_measured(h200):
    """Where measured only: 16-bit rows of 256 / 512, float32 rows of 512 / 1024, past small M."""
    assert config.backward_config(262144, 256, 0, itemsize=4).rows == 1  # within 3%: not taken
    assert config.backward_config(32768, 1024, 0, itemsize=4).rows == 2  # 117.0 us vs 127.9
    assert config.backward_config(65536, 1024, 0, itemsize=2).rows == 1  # 16-bit: no gain
    assert config.backward_config(2048, 256, 0).rows == 1  # small M: its own grid
    assert config.backward_config(4096, 256, 0).rows == 4  # a few steps per program still
    # per-head q/k norms (the pointer kernel's plan: a Hopper GPU with TMA takes BWD_TMA)
    assert config.backward_config(524288, 128, 0).rows == 16  # 120.8 us vs 383.1
    assert config.backward_config(1048576, 64, 0).rows == 16  # 120.2 us vs 717.1
    assert config.backward_config(524288, 128, 0, itemsize=2, tma=True).rows == 32  # BWD_TMA
    assert config.backward_config(524288, 128, 0, itemsize=4).rows == 1  # float32: not measured


def test_forward_warps_of_one_row(h200):
    """8 warps at 4096 columns (66.9 us vs 68.0 with 4 at 16384 rows), 4 at 2048 and 8192."""
    warps = {n: config.forward_config(16384, n, 0).num_warps for n in (2048, 4096, 8192, 16384)}
    assert warps == {2048: 4, 4096: 8, 8192: 4, 16384: 8}


def test_every_program_owns_rows_and_the_grid_depends_on_shape_only(h200):
    for m in (1, 2, 3, 17, 255, 1000, 4097):
        for n in (64, 1000, 4096, 5000, 20000, 70000):
            cfg = config.backward_config(m, n, 0)
            cfg.check(m, n)  # (groups - 1) * rows_per_program < M <= groups * rows_per_program
            assert cfg == config.backward_config(m, n, 0)


def test_forward_rows_per_program_of_short_rows(h200):
    """Several rows per program up to 1024 columns: 16 rows at 4 warps at 64 and 128, at most 4 KiB
    of x (bf16 64.8 us vs 68.5 with 64 rows at 8 warps, 1048576 x 64; float32 x 128: 8 rows,
    127.6 vs 130.8 with 16), 16 x 256 at 8 warps, then 2048-value tiles at 512 and 1024 (65.7
    us vs 68.7 with 4096-value tiles at 131072 x 512)."""
    got = {n: config.forward_config(1 << 20, n, 0) for n in (64, 128, 256, 512, 1024)}
    assert {n: (c.rows, c.num_warps) for n, c in got.items()} == {
        64: (16, 4),
        128: (16, 4),
        256: (16, 8),
        512: (4, 4),
        1024: (2, 4),
    }
    f32 = {n: config.forward_config(1 << 20, n, 0, itemsize=4) for n in (64, 128)}
    assert {n: (c.rows, c.num_warps) for n, c in f32.items()} == {64: (16, 4), 128: (8, 4)}
    assert config.forward_config(1 << 20, 128, 0, True, itemsize=8).rows == 4  # float64


def test_short_rows_at_small_m_take_the_one_row_kernel(h200):
    """Where the several-rows tile would hold one row (too few programs for 2 per SM), 512- and
    1024-wide blocks run one row per program in the one-row kernel: 128 x 257 fp32 1.58 us vs
    1.75, 256 x 1024 bf16 1.68 vs 1.90 (graph replay, tune.py part tiny)."""
    # The forward heuristic never sets pdl (an explicit option only: config.ForwardConfig), on
    # every machine: ForwardConfig's default is what it must give.
    assert config.forward_config(128, 257, 0) == config.ForwardConfig(512, 0, 4)
    assert config.forward_config(256, 1024, 0) == config.ForwardConfig(1024, 0, 2)
    assert config.forward_config(256, 256, 0).rows == 1  # narrower: not measured, rows kernel
    assert config.forward_config(1 << 20, 512, 0).rows == 4  # enough programs: several rows
    assert config.forward_config(128, 257, None).rows > 0  # the interpreter: no SM count


@pytest.mark.parametrize("triton_version", [(3, 6), (3, 9)])
def test_wide_rows_take_clusters_only_where_triton_splits_them(h200, monkeypatch, triton_version):
    """Forward 65536 columns: one pass over 8 CTAs (87.5 us vs 91.8 at 1024 rows); backward 32768
    columns: whole rows over 2 CTAs (146.0 us vs 175.6 at 2048 rows); rows exactly that wide
    only. On Triton < 3.8, or off Hopper, the one-CTA geometry of before."""
    monkeypatch.setattr(config, "TRITON_VERSION", triton_version)
    monkeypatch.setattr(config, "BWD_CLUSTER_LAUNCH", {})  # launch-made clusters: below
    clusters = triton_version >= config.CLUSTERS_MIN_TRITON
    fwd = config.forward_config(1024, 65536, 0)
    if clusters:
        assert (fwd.block, fwd.rows, fwd.num_warps, fwd.ctas) == (65536, 0, 8, 8)
    else:
        assert (fwd.block, fwd.num_warps, fwd.ctas) == (config.LOOP_BLOCK, config.LOOP_WARPS, 1)
    fwd.check(65536)
    assert config.forward_config(1024, 40000, 0).ctas == 1  # padded to 65536: 67.4 us vs 51.1
    assert config.backward_config(2048, 20000, 0).ctas == 1  # padded to 32768: 131.2 vs 115.8
    for n in (32768,):
        bwd = config.backward_config(2048, n, 0)
        if clusters:
            assert (bwd.one_tile, bwd.block, bwd.ctas, bwd.num_warps) == (True, 32768, 2, 16)
            assert not bwd.tree and bwd.rows_per_program == 32  # 64 clusters: 1 CTA per SM
        else:
            assert (bwd.one_tile, bwd.block, bwd.ctas) == (False, config.BWD_TILE, 1)
        bwd.check(2048, n)
    # never for float64 math, nor for the widths not measured to gain
    assert config.backward_config(2048, 32768, 0, float64=True).ctas == 1
    assert config.forward_config(1024, 65536, 0, float64=True).ctas == 1
    assert config.backward_config(2048, 65536, 0).ctas == 1
    assert config.backward_config(4096, 16384, 0).ctas == 1
    assert config.forward_config(2048, 32768, 0).ctas == 1
    assert config.forward_config(512, 131072, 0).ctas == 1


def test_clusters_need_hopper(h200, monkeypatch):
    monkeypatch.setattr(config, "TRITON_VERSION", (3, 9))
    monkeypatch.setattr(config, "hopper", lambda index: False)
    assert config.forward_config(1024, 65536, 0).ctas == 1
    assert config.backward_config(2048, 32768, 0).ctas == 1
    assert config.forward_config(1024, 65536, None).ctas == 1  # the interpreter


def test_rocm_is_never_taken_for_hopper(monkeypatch):
    """ROCm's MI200 / MI300 report compute capability 9.x: neither TMA nor clusters there."""
    monkeypatch.setattr(config.torch.version, "hip", "6.2")
    monkeypatch.setattr(config.torch.cuda, "get_device_capability", lambda index: (9, 4))
    config.hopper.cache_clear()
    try:
        assert not config.hopper(0)
    finally:
        config.hopper.cache_clear()


def test_wide_rows_take_a_cluster_where_cluster_forward_has_a_plan(h200, monkeypatch):
    """CLUSTER_FORWARD keyed by x's dtype and residual: rows of 192 KiB and more over
    ceil(N / block) <= 8 CTAs of a hardware cluster on Hopper, the first plan that fits, before
    the split-row rule (H200: bf16 512 x 131072 84.0 us vs 108.3 split); not float64, not where
    no plan fits in 8 CTAs (the split rule then), not in the interpreter or off Hopper."""
    monkeypatch.setattr(config, "BACKEND", "cuda")
    monkeypatch.setattr(config, "cooperative_here", lambda index: index is not None)
    config.forward_config.cache_clear()
    f32, f16 = torch.float32, torch.float16

    def fwd(m, n, dtype, residual=False, float64=False, index=0):
        return config.forward_config(m, n, index, float64, None, 0, dtype.itemsize, residual, dtype)

    bf16 = fwd(512, 131072, BF16)
    assert bf16 == config.ForwardConfig(16384, 0, 8, cluster=8)
    assert fwd(256, 262144, BF16) == config.ForwardConfig(65536, 0, 32, cluster=4)  # 2nd plan
    assert fwd(3, 150000, BF16).cluster == 3  # a ragged last CTA
    assert fwd(3, 8 * 65536, BF16).cluster == 8
    assert fwd(3, 8 * 65536 + 1, BF16).split == 33  # 9 CTAs: the split rule
    assert fwd(3, 100000, BF16) == config.ForwardConfig(16384, 0, 8, cluster=7)  # 195 KiB
    assert fwd(3, 98303, BF16).cluster == 0  # under 192 KiB a row
    f16_plan = config.ForwardConfig(16384, 0, 8, cluster=8, maxnreg=64)  # the register cap
    assert fwd(512, 131072, f16) == f16_plan
    # fp16's 2nd plan, uncapped (the kernel then widens fp16 by cvt: H100 113.8 vs 123.0 split)
    assert fwd(256, 262144, f16) == config.ForwardConfig(65536, 0, 32, cluster=4)
    res = fwd(512, 131072, BF16, residual=True)
    assert res == config.ForwardConfig(32768, 0, 32, cluster=4)
    assert fwd(512, 131072, f16, residual=True).split == 8  # not measured: the split rule
    f32_65536 = fwd(1024, 65536, f32)
    assert f32_65536 == config.ForwardConfig(32768, 0, 32, cluster=2)
    assert fwd(512, 131072, f32, residual=True).cluster == 4
    assert fwd(3, 150000, f32).cluster == 5
    assert fwd(3, 262144, torch.float64, float64=True).cluster == 0
    assert fwd(3, 262144, f32, float64=True).cluster == 0  # float64 math
    assert config.forward_config(512, 131072, 0, itemsize=2).cluster == 0  # no dtype: no plan
    for cfg, n in [(bf16, 131072), (res, 131072), (f32_65536, 65536), (f16_plan, 131072)]:
        cfg.check(n)
    assert fwd(512, 131072, BF16, index=None).cluster == 0  # the interpreter
    monkeypatch.setattr(config, "hopper", lambda index: False)
    config.forward_config.cache_clear()
    assert fwd(512, 131072, BF16).cluster == 0  # no clusters
    config.forward_config.cache_clear()


def test_cluster_plans_are_valid_configs():
    """Every CLUSTER_FORWARD plan makes a config its own checks take, at the narrowest and the
    widest row it covers."""
    for (dtype, residual), plans in config.CLUSTER_FORWARD.items():
        assert plans, (dtype, residual)
        for block, warps, maxnreg in plans:
            for n in (config.CLUSTER_MIN_ROW_BYTES // dtype.itemsize, config.MAX_CLUSTER * block):
                c = -(-n // block)
                if c <= config.MAX_CLUSTER:
                    config.ForwardConfig(block, 0, warps, cluster=c, maxnreg=maxnreg).check(n)


def test_wide_rows_split_over_cooperative_programs(h200, monkeypatch):
    """SPLIT_FORWARD, where no cluster plan takes the row (no dtype given here; on Hopper
    CLUSTER_FORWARD comes first): rows wider than 65536 columns split over programs of one
    cooperative launch (bf16 512 x 131072 123.0 us vs 140.5 chunked, float32 231.3 vs 277.6 on
    an H100); 16-bit
    rows in 16384-column chunks at 8 warps, float32 in 8192 at 16; not below 131072 columns,
    not float64, not where a row needs more programs than the SMs, not without a cooperative
    launch (the interpreter, ROCm)."""
    monkeypatch.setattr(config, "cooperative_here", lambda index: index is not None)
    bf16 = config.forward_config(512, 131072, 0, False, None, 131072 * 2, 2)
    assert bf16 == config.ForwardConfig(16384, 0, 8, split=8)
    assert config.forward_config(3, 150000, 0, itemsize=2).split == 10  # a ragged last chunk
    assert config.forward_config(3, 100000, 0, itemsize=2).split == 0  # 172.1 vs 159.8 (H200)
    f32 = config.forward_config(256, 262144, 0, False, None, 0, 4)
    assert f32 == config.ForwardConfig(8192, 0, 16, split=32)
    assert config.forward_config(1, 262144, 0, itemsize=2).split == 16  # one row, 16 SMs
    for cfg, n in [(bf16, 131072), (f32, 262144)]:
        cfg.check(n)
        assert config.split_grid(cfg, 512, 0) == H200_SMS // cfg.split * cfg.split
    assert config.split_grid(bf16, 3, 0) == 24  # no more programs than tasks
    assert config.forward_config(1024, 65536, 0, itemsize=2).split == 0
    assert config.forward_config(256, 262144, 0, True, None, 0, 8).split == 0  # float64
    widest = H200_SMS * 16384
    assert config.forward_config(1, widest, 0, itemsize=2).split == H200_SMS
    assert config.forward_config(1, widest + 1, 0, itemsize=2).split == 0  # 133 programs a row
    assert config.forward_config(512, 131072, None, itemsize=2).split == 0  # the interpreter
    monkeypatch.undo()
    config.forward_config.cache_clear()
    monkeypatch.setattr(config, "sm_count", lambda index: H200_SMS)
    monkeypatch.setattr(config.torch.version, "hip", "6.2")
    monkeypatch.setattr(config, "BACKEND", "cuda")
    assert not config.cooperative_here(0)  # ROCm: no cooperative launch through Triton
    assert config.forward_config(512, 131072, 0, itemsize=2).split == 0


def test_wide_backward_takes_a_launch_made_cluster_where_a_plan_is(h200, monkeypatch):
    """BWD_CLUSTER_LAUNCH keyed by the row's power-of-two block and x / dy's bytes per value:
    cdiv(N, block) CTAs a row, SMs * CTAs-an-SM / CTAs clusters walking the rows, the sum finish;
    a valid config for ragged widths too. Not for float64 math, not up to F64_ROWS_MAX_ELEMS
    (float64 dweight rows: twice the registers), not in the interpreter or off Hopper."""
    monkeypatch.setattr(config, "BACKEND", "cuda")
    monkeypatch.setattr(config, "BWD_CLUSTER_LAUNCH", {(65536, 2): (8192, 16, 1, True)})
    cfg = config.backward_config(4096, 65536, 0, itemsize=2)
    want = config.BackwardConfig(8192, False, 16, 256, 16, False, False, cluster=8, prefetch=True)
    config.backward_config.cache_clear()
    assert cfg == dataclasses.replace(want, pdl=config.pdl_here(0))
    cfg.check(4096, 65536)
    ragged = config.backward_config(4099, 40000, 0, itemsize=2)
    assert (ragged.cluster, ragged.block, ragged.groups) == (5, 8192, 26)
    ragged.check(4099, 40000)
    assert config.backward_config(4096, 65536, 0, itemsize=4).cluster == 0  # no float32 plan
    assert config.backward_config(4096, 65536, 0, True, itemsize=2).cluster == 0
    assert config.backward_config(1023, 65536, 0, itemsize=2).cluster == 0  # BWD_CLUSTER_MIN_M
    assert config.backward_config(1024, 65536, 0, itemsize=2).cluster == 8
    assert config.backward_config(1024, 4096, 0, itemsize=2).cluster == 0  # no plan
    monkeypatch.setattr(config, "BWD_CLUSTER_LAUNCH", {(2048, 2): (1024, 8, 1, False)})
    config.backward_config.cache_clear()
    assert config.backward_config(2048, 2048, 0, itemsize=2).cluster == 0  # 4M values: float64
    assert config.backward_config(2049, 2048, 0, itemsize=2).cluster == 2
    assert config.backward_config(4096, 65536, None, itemsize=2).cluster == 0
    monkeypatch.setattr(config, "hopper", lambda index: False)
    config.backward_config.cache_clear()
    assert config.backward_config(4096, 65536, 0, itemsize=2).cluster == 0


def test_the_measured_cluster_backward_plans(h200, monkeypatch):
    """16-bit rows of 32768 columns: 2 CTAs of 16384 at 32 warps, one CTA an SM (H100 2048 x
    32768 bf16 173.3 us against 237.1); 65536 columns keep the column tiles, 16-bit (lost on the
    H100) and float32 (lost on the H200: 404.5 us against 329.8 at 1024 rows)."""
    monkeypatch.setattr(config, "BACKEND", "cuda")
    monkeypatch.setattr(config, "TRITON_VERSION", (3, 6))  # (3.8+: Triton's own clusters first)
    bf16 = config.backward_config(2048, 32768, 0, itemsize=2)
    got = (bf16.cluster, bf16.block, bf16.num_warps, bf16.groups, bf16.prefetch)
    assert got == (2, 16384, 32, 64, False)
    assert config.backward_config(1024, 65536, 0, itemsize=4).cluster == 0
    assert config.backward_config(4096, 40000, 0, itemsize=4).cluster == 0
    f32_32k = config.backward_config(2048, 32768, 0, itemsize=4)
    assert (f32_32k.cluster, f32_32k.block, f32_32k.num_warps) == (2, 16384, 32)
    assert config.backward_config(4096, 65536, 0, itemsize=2).cluster == 0
    assert config.backward_config(256, 32768, 0, itemsize=2).cluster == 0  # lost at 256 rows
    bf16.check(2048, 32768)
    f32_32k.check(2048, 32768)

"""The launch heuristics' choices, on CPU: the measured geometry per shape (config.py says what
was measured), with the H200's 132 SMs standing in for a GPU. The kernels themselves run every
config these produce in tests/kernel/test_gpu.py on the GPU."""

from __future__ import annotations

import pytest

from rmsnorm_kernel import config

H200_SMS = 132


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(config, "sm_count", lambda index: H200_SMS)
    config.backward_config.cache_clear()
    config.forward_config.cache_clear()
    yield
    config.backward_config.cache_clear()
    config.forward_config.cache_clear()


@pytest.mark.parametrize(
    "m,groups,rows,stages",
    [
        (256, 128, 2, 1),  # small M: at least 2 rows per program (8.4 us vs 29.5 with the tree)
        (1024, 256, 4, 1),
        (2048, 256, 8, 1),
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


def test_narrow_rows_keep_the_in_launch_tree_with_float64_rows(h200):
    for m, n in ((8, 256), (128, 257), (65536, 1024)):
        cfg = config.backward_config(m, n, 0)
        assert cfg.tree and cfg.dw_float64 and cfg.stages == 1
        cfg.check(m, n)


def test_float64_math_is_never_pipelined(h200):
    cfg = config.backward_config(16384, 4096, 0, float64=True)
    assert cfg.stages == 1 and cfg.dw_float64


def test_every_program_owns_rows_and_the_grid_depends_on_shape_only(h200):
    for m in (1, 2, 3, 17, 255, 1000, 4097):
        for n in (64, 1000, 4096, 5000, 20000, 70000):
            cfg = config.backward_config(m, n, 0)
            cfg.check(m, n)  # (groups - 1) * rows_per_program < M <= groups * rows_per_program
            assert cfg == config.backward_config(m, n, 0)

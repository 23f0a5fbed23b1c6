"""``experiments/kernel_perf/strided_backward.py`` (the descriptor backward with its row tiles
dealt out grid-stride; a candidate the package does not use) against the float64 oracle: dx and
dweight for both tile orders, a last tile past M, programs with no tile, 16-bit and float32 rows;
dx bit for bit the same in both orders (the same per-row math), and each order's dweight
bitwise repeatable."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import (
    assert_close,
    assert_dweight_within_sum_bound,
    experiment_kernel,
    oracle,
    x_away_from_zero,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize(
    ("m", "n", "dtype", "rows", "groups"),
    [
        (37, 256, torch.float32, 2, 5),  # 19 tiles over 5 programs, the last past M
        (9, 512, torch.bfloat16, 4, 4),  # 3 tiles: a program with none in either order
        (16, 1024, torch.float16, 1, 3),
    ],
)
def test_strided_backward_matches_the_oracle(m, n, dtype, rows, groups):
    gen = torch.Generator().manual_seed(0)
    x = x_away_from_zero(gen, m, n).to(DEVICE, dtype)
    dy = torch.randn(m, n, generator=gen).to(DEVICE, dtype)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(DEVICE, dtype)
    rstd = torch.rsqrt(x.double().square().mean(-1) + 1e-6).float()
    _, _, dx_ref, _, _ = oracle(x, w, dy)
    mod = experiment_kernel("strided_backward")
    out = {}
    for strided in (False, True):
        dx, partial = mod.run(dy, x, w, rstd, groups, rows, 2, 4, strided)
        assert dx.dtype == dtype and partial.shape == (groups, n)
        assert_close(dx, dx_ref, dtype, f"dx strided={strided}")
        dw = partial.sum(0, dtype=torch.float64)
        assert_dweight_within_sum_bound(dw, x, dy, rstd=rstd)
        again = mod.run(dy, x, w, rstd, groups, rows, 2, 4, strided)[1]
        assert torch.equal(again, partial)
        out[strided] = dx
    assert torch.equal(out[False], out[True])

"""``experiments/kernel_perf/band_backward.py`` (a prototype backward for wide rows: a cluster of
CTAs a row meeting once per band of K rows, x and dy re-read after the meeting) against the
float64 oracle: dx and dweight, K = 1, 2, 4 (ragged last bands), with and without the split
arrive / wait (``pipe``).

On the CPU the interpreter cannot make clusters: one CTA a row (C = 1, no barrier). On a GPU
with thread-block clusters, 4 and 8 CTAs a row at 65536 columns (exact and 5 short)."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, experiment_kernel, oracle

from rmsnorm_kernel import ops

BANDS = [(1, False), (2, False), (4, False), (1, True), (2, True), (4, True)]


def _check(x, w, dy, c, k, pipe, warps, per_sm):
    band = experiment_kernel("band_backward")
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    dx, dw = band.band_backward(dy, x, w, rstd, c, k, warps, per_sm, pipe)
    what = f"C={c} K={k} pipe={pipe}, {tuple(x.shape)} {x.dtype}"
    assert_close(dx, dx_ref, x.dtype, f"dx, {what}")
    assert_close(dw, dw_ref, x.dtype, f"dweight, {what}")


@pytest.mark.parametrize(("k", "pipe"), BANDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_band_backward_one_cta_a_row_matches_the_oracle(device, dtype, k, pipe):
    m, n = 37, 300  # 5 programs on the CPU (8 rows each for K = 4: 5 in the last, a ragged band)
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.randn(m, n, device=device).to(dtype)
    _check(x, w, dy, 1, k, pipe, 4, 1)


@pytest.mark.gpu
@pytest.mark.parametrize(("k", "pipe"), BANDS)
@pytest.mark.parametrize("n", [65536, 65536 - 5])
def test_band_backward_clusters_match_the_oracle(n, k, pipe):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs thread-block clusters (compute capability 9.0 or newer)")
    m = 70
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(n, device="cuda")).to(torch.bfloat16)
    dy = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    for c, warps, per_sm in ((4, 32, 1), (8, 16, 2)):
        _check(x, w, dy, c, k, pipe, warps, per_sm)

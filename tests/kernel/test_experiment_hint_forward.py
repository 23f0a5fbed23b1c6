"""``experiments/kernel_perf/hint_forward.py`` (the one-row forward with cache hints, timed by
tune.py part ``hints``): the package's forward values bit for bit, whatever the hints (the
comparison the timing relies on), on rows the package gives its one-row kernel (N > 1024)."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import experiment_kernel

from rmsnorm_kernel import ops

HINTS = [("", "", ""), ("evict_first", "evict_last", ".cs"), ("evict_last", "evict_first", ".cg")]


@pytest.mark.parametrize("hints", HINTS)
@pytest.mark.parametrize(("m", "n", "dtype"), [(3, 1500, torch.bfloat16), (2, 2048, torch.float32)])
def test_hint_forward_equals_the_package_kernel(m, n, dtype, hints):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(m, 2 * n, device=device, dtype=dtype)[:, :n]  # a row stride of 2N
    w = torch.randn(n, device=device, dtype=dtype)
    y_ref, _, rstd_ref = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    warps = ops.forward_config(m, n, None).num_warps
    y, rstd = experiment_kernel("hint_forward").launch(x, w, 1e-6, warps, *hints)
    assert torch.equal(y, y_ref) and torch.equal(rstd, rstd_ref)

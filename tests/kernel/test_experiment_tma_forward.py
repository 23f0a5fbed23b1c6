"""``experiments/kernel_perf/tma_forward.py`` (a candidate kernel timed by tune.py part
``tmafwd``, not used by the package) against the float64 oracle: a strided tile loop, a last
tile past M, 16-bit and float32 rows, and its refusal of what descriptors cannot take."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import TOLERANCES, experiment_kernel

from rmsnorm_kernel.reference import rmsnorm_reference


@pytest.mark.parametrize(
    ("m", "n", "dtype", "rows"),
    [(7, 256, torch.float32, 2), (5, 512, torch.bfloat16, 1), (9, 1024, torch.float16, 4)],
)
def test_tma_forward_matches_the_oracle(m, n, dtype, rows):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = torch.randn(n, device=device, dtype=dtype)
    y, rstd = experiment_kernel("tma_forward").launch(x, w, 1e-6, rows, 4, 2, 1)
    assert y.dtype == dtype and rstd.dtype == torch.float32
    ref = rmsnorm_reference(x.double(), w.double(), 1e-6)
    torch.testing.assert_close(y.double(), ref, **TOLERANCES[dtype])
    r_ref = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
    torch.testing.assert_close(rstd.double(), r_ref, atol=0.0, rtol=1e-6)


def test_tma_forward_refuses_widths_a_descriptor_cannot_tile():
    x = torch.randn(3, 300)
    with pytest.raises(ValueError, match="power-of-two width"):
        experiment_kernel("tma_forward").launch(x, torch.ones(300), 1e-6, 1, 4, 2, 1)

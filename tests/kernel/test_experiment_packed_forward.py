"""``experiments/kernel_perf/packed_forward.py`` (the one-pass forward that keeps 16-bit rows
packed in registers, timed by tune.py part ``packed``): the oracle's values within the dtype's
rounding, the same bits whichever way bfloat16 is widened or the weight is loaded, and its
refusal to widen float16 through bits."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, experiment_kernel, oracle_y


@pytest.mark.parametrize("early_w", [False, True])
@pytest.mark.parametrize(("m", "n"), [(3, 2048), (2, 3000)])
def test_packed_forward_matches_the_oracle_and_its_widenings_agree(m, n, early_w):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(m, n, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, device=device, dtype=torch.bfloat16)
    launch = experiment_kernel("packed_forward").launch
    y, rstd = launch(x, w, 1e-6, 4, True, early_w)
    y_cast, rstd_cast = launch(x, w, 1e-6, 4, False, early_w)
    assert torch.equal(y, y_cast) and torch.equal(rstd, rstd_cast)
    assert_close(y, oracle_y(x, w), torch.bfloat16, "y")
    expected = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
    assert_close(rstd, expected, torch.float32, "rstd")


def test_packed_forward_float16_takes_the_cast():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(2, 1024, device=device, dtype=torch.float16)
    w = torch.randn(1024, device=device, dtype=torch.float16)
    launch = experiment_kernel("packed_forward").launch
    with pytest.raises(ValueError, match="bfloat16"):
        launch(x, w, 1e-6, 4, True)
    y, _ = launch(x, w, 1e-6, 4, False)
    assert_close(y, oracle_y(x, w), torch.float16, "y")

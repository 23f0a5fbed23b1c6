"""``experiments/kernel_perf/split_tune.py``'s variants of the split-row forward kernel (text
replaced in a copy of kernels/forward_split.py, for A/B on a GPU): each still applies to the
package's current kernel (a replaced string that no longer occurs fails here, not on the device),
and computes the same function as the package's kernel against float64. On the CPU one program a row
(the interpreter); on a GPU 8 programs a row, the same bits as the package's kernel (the variants
change when the counter's target is computed and how it is loaded, never the sums)."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, experiment_kernel, oracle_y

from rmsnorm_kernel import ops
from rmsnorm_kernel.config import ForwardConfig

TUNE = experiment_kernel("split_tune")


@pytest.mark.parametrize("variant", sorted(TUNE.VARIANTS))
def test_split_variant_matches_the_package_kernel(variant, device):
    if device == "cuda":  # 8 programs a row, 320 tasks on a grid of at most one per SM
        n, cfg = 131072 - 3, ForwardConfig(16384, 0, 8, split=8)
    else:
        n, cfg = 300, ForwardConfig(512, 0, 4, split=1)
    x = torch.randn(40, n, device=device).to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(torch.bfloat16)
    want, _, want_rstd = TUNE.run(x, w, None, cfg)
    kernel = TUNE.variant_kernel(variant)
    for _ in range(2):  # twice: the counters the first launch left serve the second
        y, _, rstd = TUNE.with_kernel(kernel, lambda: TUNE.run(x, w, None, cfg))()
        assert_close(y, oracle_y(x, w), torch.bfloat16, f"y of variant {variant}")
        assert torch.equal(y, want) and torch.equal(rstd, want_rstd), variant
    assert ops.FORWARD_SPLIT is not kernel  # swapped back

"""``experiments/kernel_perf/early_weight_forward.py`` (a candidate order of the one-row forward's
loads, timed by tune.py part ``earlyw``): the same values as the
package's forward bit for bit (the comparison the timing relies on), masked and unmasked rows,
and its refusal of an unmasked row that does not fill the block."""

from __future__ import annotations

import pytest
import torch
import triton
from kernel_helpers import experiment_kernel

from rmsnorm_kernel import ops
from rmsnorm_kernel.config import ForwardConfig


@pytest.mark.parametrize("early", [True, False])
@pytest.mark.parametrize(
    ("m", "n", "dtype", "even"),
    [(5, 64, torch.float32, True), (6, 100, torch.bfloat16, False), (3, 128, torch.float16, False)],
)
def test_early_weight_forward_equals_the_package_kernel(m, n, dtype, even, early):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(m, 2 * n, device=device, dtype=dtype)[:, :n]  # a row stride of 2N
    w = torch.randn(n, device=device, dtype=dtype)
    y, rstd = experiment_kernel("early_weight_forward").launch(x, w, 1e-6, 4, even, early)
    y_ref, _, rstd_ref = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    assert torch.equal(y, y_ref) and torch.equal(rstd, rstd_ref)


def test_early_weight_forward_refuses_unmasked_partial_rows():
    x = torch.randn(2, 100)
    with pytest.raises(ValueError, match="power of two"):
        experiment_kernel("early_weight_forward").launch(x, torch.ones(100), 1e-6, 4, True)


@pytest.mark.parametrize("early", [True, False])
@pytest.mark.parametrize(("m", "n", "rows"), [(37, 100, 4), (33, 1024, 2)])
def test_early_weight_rows_equals_the_package_kernel(m, n, rows, early):
    """The several-rows copy (a last tile past M, a row narrower than the block) gives the
    package's values bit for bit, whichever order loads the weight."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(m, n, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, device=device, dtype=torch.bfloat16)
    y, rstd = experiment_kernel("early_weight_forward").launch_rows(x, w, 1e-6, rows, 4, early)
    # The package's several-rows kernel at the same geometry: its heuristic may pick the one-row
    # kernel at this M (config.ONE_ROW_SHORT_WARPS), which reduces in another order.
    block = triton.next_power_of_2(n)
    y_ref, _, rstd_ref = ops.launch_forward(
        x, w, None, 1e-6, 0.0, x.dtype, config=ForwardConfig(block, rows, 4)
    )
    assert torch.equal(y, y_ref) and torch.equal(rstd, rstd_ref)

"""``experiments/kernel_perf/early_weight_forward.py`` (a candidate order of the one-row forward's
loads, timed by tune.py part ``earlyw``, not used by the package): the same values as the
package's forward bit for bit (the comparison the timing relies on), masked and unmasked rows,
and its refusal of an unmasked row that does not fill the block."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rmsnorm_kernel import ops
from rmsnorm_kernel.paths import REPO_ROOT


def _module():
    path = REPO_ROOT / "experiments" / "kernel_perf" / "early_weight_forward.py"
    spec = importlib.util.spec_from_file_location("early_weight_forward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("m", "n", "dtype", "even"),
    [(5, 64, torch.float32, True), (6, 100, torch.bfloat16, False), (3, 128, torch.float16, False)],
)
def test_early_weight_forward_equals_the_package_kernel(m, n, dtype, even):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(m, 2 * n, device=device, dtype=dtype)[:, :n]  # a row stride of 2N
    w = torch.randn(n, device=device, dtype=dtype)
    y, rstd = _module().launch(x, w, 1e-6, 4, even)
    y_ref, _, rstd_ref = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    assert torch.equal(y, y_ref) and torch.equal(rstd, rstd_ref)


def test_early_weight_forward_refuses_unmasked_partial_rows():
    x = torch.randn(2, 100)
    with pytest.raises(ValueError, match="power of two"):
        _module().launch(x, torch.ones(100), 1e-6, 4, True)

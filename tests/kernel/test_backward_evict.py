"""``BackwardConfig.evict``: a cache hint on x's and dy's loads in the pointer backward kernels
(the one-row kernel, one tile or column tiles, and the several-rows kernel). It changes no value:
dx and dweight keep every bit of the unhinted config's, which the oracle checks; a policy Triton
does not have, or the hint with the descriptor (TMA) kernel, is refused before any output."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from kernel_helpers import assert_close, oracle

from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import BackwardConfig
from rmsnorm_kernel.contract import ContractValueError

# (M, N, config): every pointer kernel's path, on grids of several programs.
_CASES = {
    "one tile, sum finish": (12, 300, BackwardConfig(512, True, 3, 4, 4, False, False)),
    "one tile, tree": (12, 300, BackwardConfig(512, True, 4, 3, 4, True, True)),
    "column tiles": (9, 300, BackwardConfig(128, False, 3, 3, 4, False, False)),
    "several rows": (11, 70, BackwardConfig(128, True, 3, 4, 4, False, False, rows=2)),
}


@pytest.mark.parametrize("evict", ["evict_first", "evict_last"])
@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("with_dh", [False, True])
def test_evict_hint_changes_no_bit(case, evict, with_dh, device):
    m, n, cfg = _CASES[case]
    dtype = torch.float16
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.randn(m, n, device=device).to(dtype)
    dh = torch.randn(m, n, device=device).to(dtype) if with_dh else None
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype)
    hinted = dataclasses.replace(cfg, evict=evict)
    dx, dw = ops.launch_backward(dy, x, w, rstd, 0.0, dh, dtype, config=hinted)
    dx0, dw0 = ops.launch_backward(dy, x, w, rstd, 0.0, dh, dtype, config=cfg)
    assert torch.equal(dx, dx0) and torch.equal(dw, dw0), f"{hinted} against {cfg}"
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    if dh is not None:
        dx_ref = dx_ref + dh.double()
    assert_close(dx, dx_ref, dtype, f"dx with {hinted}")
    assert_close(dw, dw_ref, dtype, f"dweight with {hinted}")


def test_evict_policies_are_checked_before_any_output(device):
    m, n = 4, 64
    x = torch.randn(m, n, device=device)
    dy = torch.randn(m, n, device=device)
    _, _, rstd = ops.launch_forward(x, None, None, 1e-6, 0.0, x.dtype)
    base = BackwardConfig(64, True, 2, 2, 4, False, False)
    with pytest.raises(ContractValueError, match=r"BackwardConfig\.evict must be one of"):
        ops.launch_backward(
            dy, x, None, rstd, 0.0, None, x.dtype, config=dataclasses.replace(base, evict="last")
        )
    tma = dataclasses.replace(base, groups=1, rows_per_program=4, tma=True, evict="evict_last")
    with pytest.raises(ContractValueError, match=r"BackwardConfig\.evict .*not with tma"):
        tma.check(m, n)


def test_the_heuristic_puts_no_hint_on_the_backward():
    """Not measured yet (tune.py part bwdevict): every heuristic config leaves the loads as
    they were."""
    for m, n in ((4, 300), (3000, 4096), (70, 20000)):
        assert config.backward_config(m, n, None).evict == ""

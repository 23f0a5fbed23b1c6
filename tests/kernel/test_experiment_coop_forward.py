"""``experiments/kernel_perf/coop_forward.py`` (the cooperative split-row forward, timed by
``experiments/h200/coop_check.sh``): y and rstd against the float64 oracle within one rounding of
the output dtype, the same bits from every schedule and from a repeat. On the CPU only one
program per row runs (the interpreter runs programs one after another, so a program waiting on
its row's partners would wait for ever); on a GPU the rows are also split over 2 and 4
cooperating programs, which is where the waiting happens."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import experiment_kernel

HAS_CUDA = torch.cuda.is_available()
SPLITS = (1, 2, 4) if HAS_CUDA else (1,)
MODES = (0, 1, 2, 3)
#: Allowed error of y against float64: the output dtype's rounding (half an ulp, relative) on top
#: of float32 arithmetic's.
RTOL = {torch.bfloat16: 2.0**-8, torch.float32: 1e-5}


def _oracle(x, w, eps):
    x64 = x.double()
    r = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return x64 * r * w.double(), r.squeeze(-1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("split", SPLITS)
def test_coop_forward_matches_float64_with_every_schedule(split, dtype):
    device = "cuda" if HAS_CUDA else "cpu"
    coop = experiment_kernel("coop_forward")
    torch.manual_seed(0)
    # 1000 columns: the last chunk is masked. More rows than programs, so the grid walks several
    # lockstep steps (the CPU's grid is one program; a GPU's 132 or so per SM count)
    m, n, eps = (300 if HAS_CUDA else 7), 1000, 1e-6
    x = torch.randn(m, 2 * n, device=device, dtype=dtype)[:, :n]  # a row stride of 2N
    w = torch.randn(2 * n, device=device, dtype=dtype)[::2]  # a weight with stride 2
    want, want_rstd = _oracle(x, w, eps)
    first = None
    for mode in MODES:
        y, rstd = coop.coop_forward(x, w, eps, split, 4, 1, mode)
        torch.testing.assert_close(y.double(), want, rtol=RTOL[dtype], atol=1e-6)
        torch.testing.assert_close(rstd.double(), want_rstd, rtol=1e-5, atol=0)
        if first is None:
            first = (y, rstd)
        # the partials are summed in chunk order by every schedule: the same bits
        assert torch.equal(y, first[0]) and torch.equal(rstd, first[1]), f"mode {mode}"
    again, _ = coop.coop_forward(x, w, eps, split, 4, 1, 3)
    assert torch.equal(again, first[0])

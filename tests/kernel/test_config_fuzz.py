"""Property test: every valid launch config computes the same function.

The heuristics (``config.py``) pick one geometry per shape, and tuning moves them; whatever they
pick must be right. Drawn here: a shape, a dtype, a weight (or none, or Llama's rounding), a
gradient of a returned ``x + residual``, and an explicit backward config (row groups, rows per
step, dweight finish, float32 or float64 row accumulation, pipelining stages, tree fan-out, warps,
CTAs per program) or forward config (rows per program, block, warps, CTAs per program). Outputs
are checked against the float64 oracle with the campaign's tolerances, and dweight for bitwise
repeats.

Profiles as in ``test_fuzz.py``: ``ci`` (default) draws small shapes for Triton's interpreter,
derandomised; ``gpu`` draws more and wider examples on CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from kernel_helpers import (
    assert_close,
    assert_dweight_within_sum_bound,
    assert_float32_sum_within_bound,
    oracle,
    oracle_y,
    x_away_from_zero,
)

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
DEVICE = "cuda" if rk.BACKEND == "cuda" else "cpu"
EXAMPLES = {"ci": 25, "gpu": 100}.get(PROFILE, 25)  # gpu: each config compiles (~1 s)
MAX_N = {"ci": 700, "gpu": 20000}.get(PROFILE, 700)
MAX_M = {"ci": 40, "gpu": 600}.get(PROFILE, 40)
#: The gpu profile does not shrink: every config it tries compiles (~1 s), so shrinking one
#: failure took 131 s on the H200 and pushed suite.sh past its limit (twenty-first session). The
#: failing case is still reported whole (shape, dtype, config, seed), enough to rerun it.
PHASES = tuple(p for p in Phase if p != Phase.shrink) if PROFILE == "gpu" else tuple(Phase)
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=PROFILE != "gpu",
    deadline=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Every 16-bit dtype: the interpreter rounds float32 -> bfloat16 like the GPU (see backend.py).
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


#: CTAs per program drawn: clusters where this Triton compiles them (config.CLUSTERS_MIN_TRITON).
CTAS = [1, 1, 2, 4] if config.TRITON_VERSION >= config.CLUSTERS_MIN_TRITON else [1]

#: Values per thread at most this many in a drawn config: wider tiles are valid but only spill
#: (and take minutes to compile), so the draws stay where a tuning script would look.
MAX_PER_THREAD = 128


#: Shared memory a drawn pipelined backward may ask for: each stage holds x, dy and dh tiles of up
#: to 4 bytes a value (12 * rows * block bytes). A larger ask is a valid config that Triton refuses
#: to compile (OutOfResources: 16384 float32 columns at 2 stages asked 262164 bytes on the H200,
#: whose limit is 232448), so the draws stay under it, as a tuning script would.
SMEM = 192 << 10


def _pow2_at_least(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _warps(draw, values: int) -> int:
    fits = [w for w in (1, 2, 4, 8, 16, 32) if values <= MAX_PER_THREAD * 32 * w]
    return draw(st.sampled_from(fits[:4]))


@st.composite
def backward_cases(draw):
    m = draw(st.integers(1, MAX_M))
    dtype = draw(st.sampled_from(DTYPES))
    # Tensor descriptors (a third of the draws): whole rows of exactly block columns, a power of
    # two from 16, one CTA, programs owning whole tiles.
    tma = draw(st.sampled_from([False, False, True]))
    if tma:
        n = draw(st.sampled_from([1 << k for k in range(4, MAX_N.bit_length())]))
    else:
        n = draw(st.one_of(st.integers(1, 300), st.integers(1, MAX_N)))
    rows_per_program = draw(st.integers(1, m))
    one_tile = tma or (n <= config.MAX_FUSED_N_BWD and draw(st.sampled_from([True, True, False])))
    rows = 1
    if one_tile:  # whole rows, in a block up to 4x wider than N
        block = (1 if tma else draw(st.sampled_from([1, 2, 4]))) * _pow2_at_least(n)
        rows = draw(st.sampled_from([r for r in (1, 2, 4, 8) if r * block <= 8192] or [1]))
    else:  # column tiles after the row reduction: a power of two, often narrower than N
        block = draw(st.sampled_from([16, 64, 256, 4096]))
    tree = draw(st.booleans())
    # Clusters (num_ctas) with the sum finish only (BackwardConfig.check says why).
    ctas = 1 if tree or tma else draw(st.sampled_from(CTAS))
    if tma:
        rows_per_program = -(-rows_per_program // rows) * rows
    # Pipelining: within SMEM, and for TMA tiles of the bytes it needs (config.py says why).
    tma_ok = not tma or rows * n * dtype.itemsize >= config.TMA_PIPELINED_MIN_BYTES
    stages = [s for s in (1, 2, 3) if s == 1 or (tma_ok and s * 12 * rows * block <= SMEM)]
    return dict(
        m=m,
        n=n,
        dtype=dtype,
        weight=draw(st.sampled_from(["none", "plain", "llama"])),
        dh=draw(st.booleans()),
        cfg=config.BackwardConfig(
            block=block,
            one_tile=one_tile,
            groups=-(-m // rows_per_program),
            rows_per_program=rows_per_program,
            num_warps=_warps(draw, rows * block),
            tree=tree,
            dw_float64=draw(st.booleans()),
            stages=draw(st.sampled_from(stages)),
            fanout=draw(st.sampled_from([2, 3, 8])),
            rows=rows,
            ctas=ctas,
            tma=tma,
        ),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@FUZZ
@given(case=backward_cases())
def test_every_backward_config_matches_the_oracle(case):
    m, n, dtype, cfg = case["m"], case["n"], case["dtype"], case["cfg"]
    gen = torch.Generator().manual_seed(case["seed"])
    # |x| >= 1/4: near-total cancellation at N = 1 or 2 (kernel_helpers.x_away_from_zero)
    x = x_away_from_zero(gen, m, n).to(DEVICE, dtype)
    dy = torch.randn(m, n, generator=gen).to(DEVICE, dtype)
    dh = torch.randn(m, n, generator=gen).to(DEVICE, dtype) if case["dh"] else None
    w = None
    if case["weight"] != "none":
        w = (1 + 0.5 * torch.randn(n, generator=gen)).to(DEVICE, dtype)
    llama = case["weight"] == "llama"
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype, llama=llama)
    first = None
    for _ in range(2):
        dx, dw = ops.launch_backward(dy, x, w, rstd, 0.0, dh, dtype, llama=llama, config=cfg)
        first = dw if first is None else first
        if w is not None:
            assert torch.equal(dw, first), f"dweight not bitwise repeatable with {cfg}"
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    if dh is not None:
        dx_ref = dx_ref + dh.double()
    assert_close(dx, dx_ref, dtype, f"dx with {cfg}")
    if w is None:
        assert dw is None
    elif llama:  # dweight sums dy times x * r rounded to x's dtype (r: the forward's float32)
        normed = (x.float() * rstd[:, None]).to(dtype).double()
        if dtype == torch.float32 and not cfg.dw_float64:
            # the float32 sum's bound, as below: an entry of 0.039 from 307 rows of terms ~1
            # (H100) is off by 1.4e-5, over an elementwise 1e-5 + 1e-4 * 0.039
            assert_float32_sum_within_bound(dw, dy.double() * normed)
        else:
            assert_close(dw, (dy.double() * normed).sum(0), dtype, f"dweight (llama) with {cfg}")
    elif dtype == torch.float32 and not cfg.dw_float64:
        # Rows summed in float32: an entry that cancels (0.0059 from terms of ~1 over 271 rows,
        # found on the H200) is off by more than an elementwise 1e-5, as any float32 order
        # would be; the classical bound of a float32 sum holds (kernel_helpers). The terms take
        # the saved rstd the backward read: at M = 1 there is no sum, only r's rounding.
        assert_dweight_within_sum_bound(dw, x, dy, rstd=rstd)
    else:
        assert_close(dw, dw_ref, dtype, f"dweight with {cfg}")


@st.composite
def forward_cases(draw):
    m = draw(st.integers(1, MAX_M))
    n = draw(st.one_of(st.integers(1, 300), st.integers(1, MAX_N)))
    rows = draw(st.sampled_from([0, 1, 2, 4, 8]))
    if rows:  # the several-rows kernel: whole rows, tiles up to 16384 values
        block = draw(st.sampled_from([1, 2])) * _pow2_at_least(n)
        fits = [r for r in (1, 2, 4, 8) if r <= rows and r * block <= 16384]
        rows = max(fits) if fits else 0  # a wider row: one row per program instead
    if not rows:  # one row per program: whole, or walked in chunks
        block = draw(st.sampled_from([16, 64, 256, _pow2_at_least(n)]))
    return dict(
        m=m,
        n=n,
        dtype=draw(st.sampled_from(DTYPES)),
        weight=draw(st.booleans()),
        cfg=ForwardConfig(
            block,
            rows,
            _warps(draw, max(rows, 1) * block),
            draw(st.sampled_from(CTAS)),
            evict_last=draw(st.booleans()),  # a cache hint: any config takes it
        ),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@FUZZ
@given(case=forward_cases())
def test_every_forward_config_matches_the_oracle(case):
    m, n, dtype, cfg = case["m"], case["n"], case["dtype"], case["cfg"]
    gen = torch.Generator().manual_seed(case["seed"])
    x = torch.randn(m, n, generator=gen).to(DEVICE, dtype)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(DEVICE, dtype) if case["weight"] else None
    y, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype, config=cfg)
    assert_close(y, oracle_y(x, w), dtype, f"y with {cfg}")
    ref_rstd = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
    assert_close(rstd, ref_rstd, torch.float32, f"rstd with {cfg}")


def _kind(cfg):
    return (cfg.rows > 1, cfg.one_tile, cfg.tree, cfg.tma)


@pytest.mark.parametrize(
    "target",
    [
        (True, True, True, False),
        (True, True, False, False),
        (False, True, True, False),
        (False, False, False, False),
        (True, True, False, True),
        (False, True, True, True),
    ],
    ids=["rows-tree", "rows-sum", "row-tree", "column-tiles", "tma-rows-sum", "tma-row-tree"],
)
def test_backward_cases_reach_each_kernel(target):
    """The strategy reaches the three backward kernels, both finishes and column tiles (a guard
    on the drawing: ``find`` searches until an example has ``(rows > 1, one_tile, tree, tma) ==
    target``, so the guard holds under every profile, not only for one derandomised sequence)."""
    found = find(
        backward_cases(),
        lambda c: _kind(c["cfg"]) == target,
        settings=settings(max_examples=2000, derandomize=True, database=None),
    )
    assert _kind(found["cfg"]) == target

"""Configs whose programs are thread-block clusters (``ForwardConfig.ctas``,
``BackwardConfig.ctas``: Triton's ``num_ctas``): checked fields, the cached launch keyed on
them, and on the GPU the wide rows a cluster holds in registers (one pass) against the float64
oracle.

Clusters need Triton >= 3.8 (``config.CLUSTERS_MIN_TRITON``); on an older Triton (the H200
image's 3.6) the cases check that such a config is refused before any launch. The heuristics pick
clusters for rows exactly 65536 (forward) or 32768 (backward) wide on Hopper with Triton >= 3.8
(``config.FWD_CLUSTERS``, ``BWD_CLUSTERS``; their choices: ``test_config.py``); these tests keep
every explicit config a tuning script passes correct. In Triton's interpreter a
program is one whole program whatever ``num_ctas``, so the CPU cases check the plumbing only.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton
from kernel_helpers import assert_close, one_tile_backward_config, oracle, oracle_y

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig

DEVICE = "cuda" if rk.BACKEND == "cuda" else "cpu"
#: Cluster launches need Triton >= 3.8 (config.CLUSTERS_MIN_TRITON); on an older one the GPU
#: cases below check the refusal instead.
CLUSTERS = config.TRITON_VERSION >= config.CLUSTERS_MIN_TRITON
gpu = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)


def _sum_config(m, n, groups, warps, ctas):
    return one_tile_backward_config(
        m, -(-m // groups), block=triton.next_power_of_2(n), num_warps=warps, tree=False, ctas=ctas
    )


def _clusters_or_refusal(launch):
    """``launch()`` where this Triton runs clusters; elsewhere assert that it is refused, naming
    the version, and return None."""
    if CLUSTERS:
        return launch()
    with pytest.raises(ValueError, match=r"ctas > 1 needs Triton >= 3\.8"):
        launch()
    return None


@pytest.mark.parametrize("ctas", [0, 3, 16])
def test_ctas_is_checked_by_name(ctas):
    x = torch.randn(4, 64, device=DEVICE)
    with pytest.raises(ValueError, match=r"ForwardConfig.ctas must be one of \(1, 2, 4, 8\)"):
        ops.launch_forward(x, None, None, 1e-6, 0.0, x.dtype, config=ForwardConfig(64, 0, 4, ctas))
    _, _, rstd = ops.launch_forward(x, None, None, 1e-6, 0.0, x.dtype)
    cfg = _sum_config(4, 64, 2, 4, ctas)
    with pytest.raises(ValueError, match=r"BackwardConfig.ctas must be one of"):
        ops.launch_backward(x, x, None, rstd, 0.0, None, x.dtype, config=cfg)


def test_old_triton_is_refused_by_name(monkeypatch):
    """Before Triton 3.8 a cluster config is refused before any launch, naming the version."""
    monkeypatch.setattr(config, "TRITON_VERSION", (3, 6))
    x = torch.randn(4, 64, device=DEVICE)
    with pytest.raises(ValueError, match=r"ForwardConfig.ctas > 1 needs Triton >= 3.8"):
        ops.launch_forward(x, None, None, 1e-6, 0.0, x.dtype, config=ForwardConfig(64, 0, 4, 2))
    y = ops.launch_forward(x, None, None, 1e-6, 0.0, x.dtype, config=ForwardConfig(64, 0, 4, 1))
    assert y[0].shape == x.shape  # one CTA runs on any Triton


def test_clusters_need_the_sum_finish():
    """The tree's counters are scalar atomics: every CTA of a cluster would run them."""
    x = torch.randn(4, 64, device=DEVICE)
    w = torch.randn(64, device=DEVICE)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
    cfg = dataclasses.replace(_sum_config(4, 64, 2, 4, 2), tree=True)
    with pytest.raises(ValueError, match=r"ctas > 1 needs the sum finish"):
        ops.launch_backward(x, x, w, rstd, 0.0, None, x.dtype, config=cfg)


def test_cluster_configs_compute_the_same_function():
    """Every launcher takes ``ctas`` (the interpreter runs it as one program; the GPU cases
    below run real clusters)."""
    m, n = 6, 300
    x = torch.randn(m, n, device=DEVICE)
    w = torch.randn(n, device=DEVICE)
    dy = torch.randn(m, n, device=DEVICE)
    fwd = ForwardConfig(512, 0, 4, 2)
    out = _clusters_or_refusal(
        lambda: ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype, config=fwd)
    )
    if out is None:
        return
    y, _, rstd = out
    assert_close(y, oracle_y(x, w), torch.float32, "y")
    dx, dw = ops.launch_backward(
        dy, x, w, rstd, 0.0, None, x.dtype, config=_sum_config(m, n, 3, 4, 2)
    )
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    assert_close(dx, dx_ref, torch.float32, "dx")
    assert_close(dw, dw_ref, torch.float32, "dweight")


@gpu
def test_the_cached_launch_keys_on_ctas():
    """Two configs that differ only in ``ctas`` are two compiled handles, and each relaunch
    takes its own (the interpreter keeps no handles)."""
    x = torch.randn(3, 256, device=DEVICE)
    before = set(ops.FORWARD.handles)
    outs = []
    ctas_list = (1, 2) if CLUSTERS else (1,)
    for _ in range(2):
        for ctas in ctas_list:
            cfg = ForwardConfig(256, 0, 4, ctas)
            outs.append(ops.launch_forward(x, None, None, 1e-6, 0.0, x.dtype, config=cfg)[0])
    new = [k for k in ops.FORWARD.handles if k not in before]
    assert sorted(k[4] for k in new) == list(ctas_list)  # (device, consts, warps, stages, ctas)
    for y in outs[1:]:
        assert torch.equal(y, outs[0])


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize(
    "n,warps,ctas", [(32768, 16, 2), (65536, 16, 4), (65537, 16, 8), (131072, 32, 8)]
)
def test_wide_rows_in_one_pass_over_a_cluster_gpu(n, warps, ctas, dtype):
    """Rows past MAX_FUSED_N held whole in the registers of a cluster: y and rstd against the
    float64 oracle, rows read with a row stride."""
    m = 37
    x = torch.randn(m, n + 64, device="cuda", dtype=dtype)[:, :n]
    w = (1 + 0.3 * torch.randn(n, device="cuda")).to(dtype)
    cfg = ForwardConfig(triton.next_power_of_2(n), 0, warps, ctas)
    out = _clusters_or_refusal(lambda: ops.launch_forward(x, w, None, 1e-6, 0.0, dtype, config=cfg))
    if out is None:
        return
    y, _, rstd = out
    assert_close(y, oracle_y(x, w), dtype, f"y with {cfg}")
    ref = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
    assert_close(rstd, ref, torch.float32, f"rstd with {cfg}")


@gpu
@pytest.mark.parametrize("n,warps,ctas", [(16384, 8, 2), (32768, 16, 2), (65536, 16, 4)])
def test_one_tile_backward_over_a_cluster_gpu(n, warps, ctas):
    """The one-tile backward with each row split over a cluster, sum finish: dx and dweight
    against the oracle, dweight bitwise repeatable."""
    m, dtype = 300, torch.bfloat16
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = (1 + 0.3 * torch.randn(n, device="cuda")).to(dtype)
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype)
    cfg = _sum_config(m, n, 132 // ctas, warps, ctas)
    out = _clusters_or_refusal(
        lambda: ops.launch_backward(dy, x, w, rstd, 0.0, None, dtype, config=cfg)
    )
    if out is None:
        return
    dx, dw = out
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    assert_close(dx, dx_ref, dtype, f"dx with {cfg}")
    assert_close(dw, dw_ref, dtype, f"dweight with {cfg}")
    again = ops.launch_backward(dy, x, w, rstd, 0.0, None, dtype, config=cfg)[1]
    assert torch.equal(again, dw)

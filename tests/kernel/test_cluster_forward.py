"""The cluster forward (``ForwardConfig.cluster``: each row over the CTAs of one hardware
thread-block cluster, one cluster barrier a row) against the float64 oracle and against the
split-row kernel of the same block and warps, whose partials and order of additions it shares
(so the same bits), with every feature of the one-row kernel (weight or none, offset, residual,
Llama's rounding, float64, strided rows, weight views).

On the CPU the interpreter cannot make clusters, so only ``cluster = 1`` runs there (one CTA a
row, the same code but the barrier); on a GPU 2-8 CTAs a row, ragged and exact widths (masked
and unmasked), CUDA-graph replay, the cached launch and Triton's launch hooks.
"""

from __future__ import annotations

import functools

import pytest
import torch
from kernel_helpers import (
    TOLERANCES,
    assert_close,
    assert_graph_replays,
    feature_matrix,
    feature_rows,
    forward_with,
    oracle,
    oracle_y,
)

from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig
from rmsnorm_kernel.contract import ContractValueError

BF16 = torch.bfloat16
EPS = 1e-6

_launch = forward_with


def _pairs(
    n: int, device: str, on_gpu: tuple[int, ...] = (3, 8)
) -> list[tuple[ForwardConfig, ForwardConfig]]:
    """(cluster config, split config of the same block and 4 warps) covering ``n`` columns: one
    CTA a row on the CPU, ``on_gpu`` on a GPU (each a compile of both kernels: the GPU run
    stays within a minute or two), each with the narrowest power-of-two block that covers."""
    out = []
    for c in (1,) if device == "cpu" else on_gpu:
        block = 1 << max(0, (-(-n // c) - 1).bit_length())
        out.append((ForwardConfig(block, 0, 4, cluster=c), ForwardConfig(block, 0, 4, split=c)))
    return out


def _same(got, want, what):
    for a, b, name in zip(got, want, ("y", "h", "rstd"), strict=True):
        assert (a is None) == (b is None), f"{name}: {what}"
        assert a is None or torch.equal(a, b), f"{name} differs from the split kernel's: {what}"


@pytest.mark.parametrize("dtype", [torch.float32, BF16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("n", [1, 300, 1024])
def test_cluster_matches_the_oracle_and_the_split_kernels_bits(device, dtype, n):
    m = 5 if device == "cpu" else 300
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    # one column on a GPU: 8 CTAs a row, 7 of them past the row's end
    for cfg, split in _pairs(n, device, on_gpu=(8,) if n == 1 else (3, 8)):
        got = _launch(x, w, cfg)
        y, h, rstd = got
        assert h is None
        assert_close(y, oracle_y(x, w), dtype, f"y with {cfg}")
        want_r = torch.rsqrt(x.double().pow(2).mean(-1) + EPS)
        torch.testing.assert_close(rstd.double(), want_r, **TOLERANCES[torch.float32])
        assert rstd.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
        _same(got, _launch(x, w, split), cfg)
        _same(_launch(x, w, cfg), got, f"{cfg} not reproducible")


@feature_matrix
def test_cluster_features(device, offset, with_weight, llama):
    """Offset, no weight and Llama's rounding (x * r rounded to x's dtype before the weight)."""
    x, w = feature_rows(device, with_weight)
    for cfg, split in _pairs(x.shape[1], device, on_gpu=(4,)):
        got = _launch(x, w, cfg, offset=offset, llama=llama)
        assert_close(got[0], oracle_y(x, w, offset=offset), BF16, f"y with {cfg}")
        _same(got, _launch(x, w, split, offset=offset, llama=llama), cfg)


@pytest.mark.parametrize("dtype", [torch.float32, BF16, torch.float16], ids=str)
def test_cluster_residual(device, dtype):
    """h = x + residual, rounded to x's dtype, is returned and normalised."""
    n = 513
    x = torch.randn(6, n, device=device).to(dtype)
    res = torch.randn(6, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.zeros(6, n, device=device, dtype=dtype)
    want_y, want_h, *_ = oracle(x, w, dy, EPS, residual=res)
    for cfg, split in _pairs(n, device):
        got = _launch(x, w, cfg, residual=res)
        y, h, _ = got
        assert torch.equal(h, (x.double() + res.double()).to(dtype)), f"h with {cfg}"
        assert_close(y, want_y, dtype, f"y with {cfg}")
        assert_close(h, want_h, dtype, f"h with {cfg}")
        _same(got, _launch(x, w, split, residual=res), cfg)


def test_cluster_strided_rows_and_weight_view(device):
    """Rows with a row stride wider than N and a weight read with its own stride."""
    n = 400
    big = torch.randn(7, 1000, device=device)
    x = big[:, 100 : 100 + n]
    w = torch.randn(n, 3, device=device)[:, 1]  # stride 3
    for cfg, _ in _pairs(n, device):
        y, _, _ = _launch(x, w, cfg)
        assert_close(y, oracle_y(x, w), torch.float32, f"y with {cfg}")


def test_cluster_inference_skips_rstd(device):
    x = torch.randn(3, 260, device=device)
    w = torch.randn(260, device=device)
    y, _, rstd = _launch(x, w, _pairs(260, device)[-1][0], keep_rstd=False)
    assert rstd is None
    assert_close(y, oracle_y(x, w), torch.float32, "y without rstd")


def test_cluster_config_is_checked(device):
    """Bad cluster configs are refused by field name, before any output is written."""
    x = torch.randn(4, 300, device=device).to(BF16)
    w = torch.randn(300, device=device).to(BF16)
    cases = [
        (ForwardConfig(128, 0, 4, cluster=2), "cluster \\* block >= N = 300"),
        (ForwardConfig(512, 2, 4, cluster=1), "rows == 0"),
        (ForwardConfig(512, 0, 4, cluster=9), "cluster must be 0 \\(off\\) or 1 to 8"),
        (ForwardConfig(512, 0, 4, cluster=-1), "cluster must be 0 \\(off\\) or 1 to 8"),
        (ForwardConfig(512, 0, 4, cluster=1, pdl=True), "takes none of pdl"),
        (ForwardConfig(512, 0, 4, cluster=1, split=1), "takes none of split"),
        (ForwardConfig(512, 0, 4, cluster=1, stages=2), "takes none of stages"),
        (ForwardConfig(512, 0, 4, cluster=1, packed=True, ctas=2), "takes none of ctas, packed"),
        (ForwardConfig(512, 0, 4, maxnreg=64), "maxnreg caps the cluster kernel.*cluster > 0"),
        (ForwardConfig(512, 0, 4, cluster=1, maxnreg=8), "maxnreg must be 0 .* or 16 to 255"),
        (ForwardConfig(512, 0, 4, cluster=1, maxnreg=256), "maxnreg must be 0 .* or 16 to 255"),
        (ForwardConfig(512, 0, 4, cluster=1, maxnreg=64.0), "maxnreg must be an int"),
        (ForwardConfig(512, 0, 4, cluster=1, maxnreg=True), "maxnreg must be an int"),
    ]
    if device == "cpu":
        cases.append((ForwardConfig(256, 0, 4, cluster=2), "needs compiled kernels on a GPU"))
    for cfg, match in cases:
        with pytest.raises(ContractValueError, match=match):
            _launch(x, w, cfg)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [BF16, torch.float32], ids=str)
def test_cluster_wide_rows_and_graph_replay(dtype):
    """Rows of 131072 columns over 2, 4 and 8 CTAs (exact: unmasked; 5 short: masked), eager
    through the cached launch, then captured in a CUDA graph and replayed twice: the same bits
    each way, and the split kernel's."""
    for n in (131072, 131072 - 5):
        x = torch.randn(70, n, device="cuda").to(dtype)
        w = (1 + 0.5 * torch.randn(n, device="cuda")).to(dtype)
        plans = [(65536, 32), (32768, 16), (16384, 8)] if dtype == BF16 else [(32768, 32)]
        for block, warps in plans:
            c = -(-n // block)
            cfg = ForwardConfig(block, 0, warps, cluster=c)
            y, _, rstd = _launch(x, w, cfg)
            cached = ops.FORWARD_CLUSTER.launches["cached"]
            y2, _, rstd2 = _launch(x, w, cfg)
            assert ops.FORWARD_CLUSTER.launches["cached"] == cached + 1, "not the cached launch"
            assert_close(y, oracle_y(x, w), dtype, f"y, {n} columns over {c} CTAs")
            assert torch.equal(y, y2) and torch.equal(rstd, rstd2), cfg
            _same((y, None, rstd), _launch(x, w, ForwardConfig(block, 0, warps, split=c)), cfg)
            call = functools.partial(_launch, x, w, cfg)
            assert_graph_replays(call, (y, None, rstd), str(cfg))


@pytest.mark.parametrize("dtype", [torch.float16, BF16], ids=str)
def test_a_register_cap_changes_no_bit(device, dtype):
    """``maxnreg`` (ptxas' register cap) gives the uncapped kernel's bits, eager and cached; on a
    GPU over 8 CTAs a row (exact and ragged), and the capped handle really holds at most that
    many registers a thread (more CTAs an SM: the point of the cap). The interpreter ignores it
    (one CTA a row)."""
    cols = [300] if device == "cpu" else [131072, 131072 - 3]
    for n in cols:
        c = 1 if device == "cpu" else 8
        block = 1 << (-(-n // c) - 1).bit_length()
        x = torch.randn(40, n, device=device).to(dtype)
        w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
        want = _launch(x, w, ForwardConfig(block, 0, 8, cluster=c))
        capped = ForwardConfig(block, 0, 8, cluster=c, maxnreg=64)
        _same(_launch(x, w, capped), want, f"{capped}")
        _same(_launch(x, w, capped), want, f"{capped}, the cached launch")
        assert_close(want[0], oracle_y(x, w), dtype, f"y with {capped}")
    if device == "cuda":
        kernel = ops.FORWARD_CLUSTER_CAPPED[64]
        assert kernel.launches["cached"] >= 2
        regs = {compiled.n_regs for compiled in kernel._clustered.values()}
        assert regs and max(regs) <= 64, regs


@pytest.mark.gpu
def test_cluster_launch_with_a_launch_hook():
    """With a Triton launch hook installed (a profiler), the cluster launch still runs as
    clusters (the split kernel's bits) and the hook sees it."""
    from triton import knobs

    seen = []
    n = 131072
    x = torch.randn(9, n, device="cuda").to(BF16)
    w = torch.randn(n, device="cuda").to(BF16)
    cfg = ForwardConfig(32768, 0, 16, cluster=4)
    want = _launch(x, w, cfg)
    old = knobs.runtime.launch_enter_hook
    knobs.runtime.launch_enter_hook = lambda meta: seen.append(meta)
    try:
        got = _launch(x, w, cfg)
        torch.cuda.synchronize()
    finally:
        knobs.runtime.launch_enter_hook = old
    assert seen, "the launch hook did not see the cluster launch"
    _same(got, want, "with a launch hook")


@pytest.mark.gpu
def test_a_cluster_launch_needs_hopper(monkeypatch):
    """On a GPU without thread-block clusters an explicit cluster config is refused by name."""
    x = torch.randn(2, 300, device="cuda")
    monkeypatch.setattr(config, "hopper", lambda index: False)
    with pytest.raises(ContractValueError, match="compute capability 9.0"):
        _launch(x, None, ForwardConfig(256, 0, 4, cluster=2))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "key", sorted(config.CLUSTER_FORWARD, key=str), ids=lambda k: f"{k[0]}-res{int(k[1])}"
)
def test_the_heuristic_takes_its_cluster_plans(key):
    """Each CLUSTER_FORWARD plan, taken by the heuristic at the widest row it covers (exact and
    ragged: 8 CTAs), against the oracle and the split kernel of the same block and warps (the
    same bits)."""
    dtype, residual = key
    if not config.cluster_launch_here(torch.cuda.current_device()):
        pytest.skip("needs a Hopper or newer GPU (thread-block clusters)")
    for block, warps, maxnreg in config.CLUSTER_FORWARD[key]:
        n = block * config.MAX_CLUSTER  # the widest row the plan covers
        for cols in (n, n - 3):
            x = torch.randn(40, cols, device="cuda").to(dtype)
            w = (1 + 0.5 * torch.randn(cols, device="cuda")).to(dtype)
            res = torch.randn(40, cols, device="cuda").to(dtype) if residual else None
            index = x.device.index
            cfg = ops._heuristic_forward(x, res, 40, cols, index, torch.float32)
            plan = (cfg.block, cfg.num_warps, cfg.cluster, cfg.maxnreg)
            assert plan == (block, warps, 8, maxnreg), (key, cols, cfg)
            got = ops.launch_forward(x, w, res, EPS, 0.0, dtype)
            want_y, want_h, *_ = oracle(x, w, torch.zeros_like(x), EPS, residual=res)
            assert_close(got[0], want_y, dtype, f"y, {cols} columns with {cfg}")
            split = ForwardConfig(cfg.block, 0, cfg.num_warps, split=cfg.cluster)
            _same(got, _launch(x, w, split, residual=res), cfg)

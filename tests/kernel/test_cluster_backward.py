"""The cluster backward (``BackwardConfig.cluster``: each row over the CTAs of one hardware
thread-block cluster, rows walked by a persistent grid of clusters, dweight by the sum launch)
against the float64 oracle, with every feature of the tile kernels (weight or none, offset, the
gradient of a returned x + residual, Llama's rounding, dy's summed parts and dx's second dtype,
strided rows, weight views), dweight bitwise repeatable.

On the CPU the interpreter cannot make clusters, so only ``cluster = 1`` runs there (one CTA a
row, the same code but the barrier); on a GPU 2-8 CTAs a row, ragged and exact widths, the
cached launch and CUDA-graph replay.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from kernel_helpers import (
    assert_close,
    assert_dweight_within_sum_bound,
    assert_graph_replays,
    oracle,
)

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import BackwardConfig
from rmsnorm_kernel.contract import ContractValueError

BF16 = torch.bfloat16


def _config(m: int, n: int, c: int, groups: int, warps: int = 4, **fields) -> BackwardConfig:
    """``groups`` clusters (fewer where M is short) of the narrowest power-of-two block that
    covers a row in ``c`` CTAs, as many CTAs as that block needs (``c`` or fewer)."""
    block = 1 << (-(-n // c) - 1).bit_length()
    rows_per_program = -(-m // groups)
    return BackwardConfig(
        block,
        False,
        -(-m // rows_per_program),
        rows_per_program,
        warps,
        False,
        False,
        cluster=-(-n // block),
        **fields,
    )


def _ctas(device: str, on_gpu=(2, 8)) -> tuple[int, ...]:
    return (1,) if device == "cpu" else on_gpu


def _backward(x, w, dy, cfg, *, dh=None, llama=False, offset=0.0, **kwargs):
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, offset, x.dtype, llama=llama)
    return ops.launch_backward(
        dy, x, w, rstd, offset, dh, x.dtype, llama=llama, config=cfg, **kwargs
    )


@pytest.mark.parametrize("prefetch", [False, True], ids=["", "prefetch"])
@pytest.mark.parametrize("dtype", [torch.float32, BF16, torch.float16], ids=str)
@pytest.mark.parametrize("n", [1, 300, 1024])
def test_cluster_backward_matches_the_oracle(device, dtype, n, prefetch):
    """One row to a cluster and several; a last cluster with fewer rows; repeatable bits, and
    the same bits with the next row loaded early (``prefetch``: a hint)."""
    m = 7 if device == "cpu" else 300
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.randn(m, n, device=device).to(dtype)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    for c in _ctas(device, (2, 8)):
        for groups in (1, 3, m):
            cfg = _config(m, n, c, groups, prefetch=prefetch)
            dx, dw = _backward(x, w, dy, cfg)
            assert_close(dx, dx_ref, dtype, f"dx, {cfg}")
            assert_close(dw, dw_ref, dtype, f"dweight, {cfg}")
            dx2, dw2 = _backward(x, w, dy, cfg)
            assert torch.equal(dx, dx2) and torch.equal(dw, dw2), f"not repeatable: {cfg}"
            if prefetch:
                dx3, dw3 = _backward(x, w, dy, dataclasses.replace(cfg, prefetch=False))
                assert torch.equal(dx, dx3) and torch.equal(dw, dw3), f"prefetch: {cfg}"


@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_cluster_backward_offset_without_weight_with_dh(device, offset):
    """No weight (u = dy, no dweight) and the gradient of a returned x + residual added to dx;
    with a weight, Gemma's offset (u = dy * (1 + w))."""
    m, n = 9, 700
    x = torch.randn(m, n, device=device)
    dy = torch.randn(m, n, device=device)
    dh = torch.randn(m, n, device=device)
    for c in _ctas(device, (4,)):
        cfg = _config(m, n, c, 2)
        dx, dw = _backward(x, None, dy, cfg, dh=dh)
        assert dw is None
        _, _, dx_ref, _, _ = oracle(x, None, dy)
        assert_close(dx, dx_ref + dh.double(), torch.float32, f"dx + dh, {cfg}")
        w = 0.5 * torch.randn(n, device=device)
        dx, dw = _backward(x, w, dy, cfg, offset=offset)
        _, _, dx_ref, dw_ref, _ = oracle(x, w, dy, offset=offset)
        assert_close(dx, dx_ref, torch.float32, f"dx, offset {offset}, {cfg}")
        assert_close(dw, dw_ref, torch.float32, f"dweight, offset {offset}, {cfg}")


@pytest.mark.parametrize("dtype", [torch.float16, BF16], ids=str)
def test_cluster_backward_llama_rounding_agrees_with_the_tile_kernels(device, dtype):
    """Llama's rounding (dweight sums dy times x * r rounded to x's dtype): the same dx and
    dweight as the heuristic's kernels to float32 rounding."""
    m, n = 6, 520
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.randn(m, n, device=device).to(dtype)
    want_dx, want_dw = _backward(x, w, dy, None, llama=True)
    for c in _ctas(device, (4,)):
        dx, dw = _backward(x, w, dy, _config(m, n, c, 2), llama=True)
        torch.testing.assert_close(dx.float(), want_dx.float(), rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(dw.double(), want_dw.double(), rtol=2e-3, atol=1e-3)


def test_cluster_backward_dy_parts_and_second_dx(device):
    """The Inductor pass's inputs: dy summed from three parts in the kernel (rounded once to
    their dtype), and dx also stored rounded to bfloat16."""
    m, n = 5, 300
    x = torch.randn(m, n, device=device)
    w = torch.randn(n, device=device)
    parts = [torch.randn(m, n, device=device) for _ in range(3)]
    dy = (parts[0].double() + parts[1].double() + parts[2].double()).float()
    dx2 = torch.empty(m, n, device=device, dtype=BF16)
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    for c in _ctas(device, (2,)):
        # (prefetch is a hint the kernel skips where dy comes in parts)
        cfg = _config(m, n, c, 2, prefetch=True)
        dx, dw = _backward(
            x, w, parts[0], cfg, dy_parts=((parts[1], n), (parts[2], n)), dx2_out=dx2
        )
        assert_close(dx, dx_ref, torch.float32, f"dx of summed parts, {cfg}")
        assert_close(dw, dw_ref, torch.float32, f"dweight of summed parts, {cfg}")
        assert torch.equal(dx2, dx.to(BF16)), f"dx2, {cfg}"


def test_cluster_backward_strided_rows_and_weight_view(device):
    """x and dy rows with a row stride wider than N, a weight read with its own stride."""
    m, n = 7, 400
    x = torch.randn(m, 1000, device=device)[:, 100 : 100 + n]
    dy = torch.randn(m, 900, device=device)[:, 3 : 3 + n]
    w = torch.randn(n, 3, device=device)[:, 1]
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    for c in _ctas(device, (4,)):
        cfg = _config(m, n, c, 3)
        _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype, stride_x=1000)
        dx, dw = ops.launch_backward(
            dy, x, w, rstd, 0.0, None, x.dtype, stride_dy=900, stride_x=1000, config=cfg
        )
        assert_close(dx, dx_ref, torch.float32, f"dx, {cfg}")
        assert_close(dw, dw_ref, torch.float32, f"dweight, {cfg}")


def test_cluster_backward_config_is_checked(device):
    """Bad cluster configs are refused by field name, before any output is written."""
    m, n = 4, 300
    x = torch.randn(m, n, device=device)
    w = torch.randn(n, device=device)
    dy = torch.randn(m, n, device=device)
    cases = [
        (BackwardConfig(128, False, 2, 2, 4, False, False, cluster=2), "cluster == cdiv"),
        (BackwardConfig(512, False, 2, 2, 4, False, False, cluster=2), "cluster == cdiv"),
        (BackwardConfig(512, False, 2, 2, 4, False, False, cluster=9), "0 \\(off\\) or 1 to 8"),
        (BackwardConfig(512, False, 2, 2, 4, False, False, cluster=-1), "0 \\(off\\) or 1 to 8"),
        (BackwardConfig(512, False, 2, 2, 4, False, False, cluster=True), "0 \\(off\\) or 1"),
        (BackwardConfig(512, True, 2, 2, 4, False, False, cluster=1), "takes none of one_tile"),
        (BackwardConfig(512, False, 2, 2, 4, True, False, cluster=1), "takes none of tree"),
        (BackwardConfig(512, False, 2, 2, 4, False, False, 2, cluster=1), "none of stages > 1"),
        (BackwardConfig(512, False, 2, 2, 4, False, False, ctas=2, cluster=1), "none of ctas"),
        (BackwardConfig(512, False, 1, 2, 4, False, False, cluster=1), "cover M rows"),
        (BackwardConfig(512, False, 2, 2, 4, False, False, prefetch=True), "prefetch needs"),
    ]
    if device == "cpu":
        cfg = BackwardConfig(256, False, 2, 2, 4, False, False, cluster=2)
        cases.append((cfg, "needs compiled kernels on a GPU"))
    for cfg, match in cases:
        with pytest.raises(ContractValueError, match=match):
            _backward(x, w, dy, cfg)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [BF16, torch.float32], ids=str)
def test_cluster_backward_wide_rows_and_graph_replay(dtype):
    """Rows of 65536 columns over 2, 4 and 8 CTAs (exact, and 5 short), eager through the cached
    launch, then captured in a CUDA graph and replayed twice: the same bits each way."""
    for n in (65536, 65536 - 5):
        m = 70
        x = torch.randn(m, n, device="cuda").to(dtype)
        w = (1 + 0.5 * torch.randn(n, device="cuda")).to(dtype)
        dy = torch.randn(m, n, device="cuda").to(dtype)
        _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
        for c, warps, prefetch in ((2, 32, False), (4, 16, True), (8, 8, False), (8, 16, True)):
            cfg = _config(m, n, c, 9, warps, prefetch=prefetch)
            dx, dw = _backward(x, w, dy, cfg)
            cached = ops.BACKWARD_CLUSTER.launches["cached"]
            dx2, dw2 = _backward(x, w, dy, cfg)
            assert ops.BACKWARD_CLUSTER.launches["cached"] == cached + 1, "not the cached launch"
            assert_close(dx, dx_ref, dtype, f"dx, {n} columns, {cfg}")
            assert_close(dw, dw_ref, dtype, f"dweight, {n} columns, {cfg}")
            assert torch.equal(dx, dx2) and torch.equal(dw, dw2), cfg
            _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype)
            call = functools.partial(ops.launch_backward, dy, x, w, rstd, 0.0, None, dtype)
            assert_graph_replays(functools.partial(call, config=cfg), (dx, dw), str(cfg))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "m,n,dtype", [(1024, 32768, BF16), (1100, 20000, torch.float16), (1024, 30000, torch.float32)]
)
def test_the_heuristic_takes_the_cluster_backward_through_autograd(m, n, dtype):
    """Through ``rmsnorm`` and autograd, the shapes BWD_CLUSTER_LAUNCH takes on Hopper (rows of
    16385-32768 columns, ragged ones included) run the cluster kernel: dx against float64,
    dweight within the float32 sum's bound (a float32 weight), both bitwise repeatable."""
    if not torch.cuda.get_device_capability()[0] >= 9:
        pytest.skip("needs thread-block clusters (compute capability 9.0 or newer)")
    size = torch.empty(0, dtype=dtype).element_size()
    if config.backward_config(m, n, torch.cuda.current_device(), itemsize=size).cluster == 0:
        pytest.skip("this Triton's own clusters take these rows first (config.BWD_CLUSTERS)")
    x = torch.randn(m, n, device="cuda").to(dtype)
    # a float32 weight (F.rms_norm's rule: y and dy stay in x's dtype): dweight in float32, so
    # the float32 sum's bound applies to it
    w = 1 + 0.5 * torch.randn(n, device="cuda")
    dy = torch.randn(m, n, device="cuda").to(dtype)
    grads = []
    for _ in range(2):
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        # (a cluster launch counts as cached each time, its first, compiling one included)
        before = ops.BACKWARD_CLUSTER.launches["cached"]
        rk.rmsnorm(xg, wg, 1e-6).backward(dy)
        after = ops.BACKWARD_CLUSTER.launches["cached"]
        assert after == before + 1, "the heuristic did not take the cluster backward"
        grads.append((xg.grad, wg.grad))
    _, _, dx_ref, _, _ = oracle(x, w, dy)
    assert_close(grads[0][0], dx_ref, dtype, f"dx, {m}x{n} {dtype}")
    assert_dweight_within_sum_bound(grads[0][1], x, dy)
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])

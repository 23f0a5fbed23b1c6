"""``experiments/kernel_perf/wide_split.py``'s split-row forward (wide chunks, the weight loaded
each step, 16-bit chunks widened by their bits; 39th session, not in the package), swapped in for
``ops.FORWARD_SPLIT_STAGED`` as ``split_tune.py --wide`` does: the same bits as the package's split
kernel (the same tasks, partials and order of additions) and float64's values. On the CPU one
program a row (the interpreter); on a GPU 2 and 4 programs a row at 1 and 2 programs an SM. Both
waits that give values: every thread spinning, or one lane a warp (``SYNCS``; the same in the
interpreter)."""

from __future__ import annotations

import functools

import pytest
import torch
from kernel_helpers import assert_close, experiment_kernel, oracle_y

from rmsnorm_kernel import ops
from rmsnorm_kernel.config import ForwardConfig
from rmsnorm_kernel.launch import CachedKernel

TUNE = experiment_kernel("split_tune")
WIDE = experiment_kernel("wide_split")
CLUSTER = experiment_kernel("cluster_split")


@pytest.mark.parametrize("sync", ["all", "lane0"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_wide_split_gives_the_package_kernels_bits(dtype, sync, device):
    if device == "cuda":  # n odd: the last chunk masked
        n = 131072 - 3
        cases = [(65536 if dtype != torch.float32 else 32768, 32, 1), (16384, 8, 2)]
    else:
        n, cases = 300, [(512, 4, 1)]
    x = torch.randn(40, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    kernel = CachedKernel(WIDE.variant_kernel(sync), cooperative=True)
    for block, warps, per_sm in cases:
        c = -(-n // block)
        want, _, want_rstd = TUNE.run(x, w, None, ForwardConfig(block, 0, warps, split=c))
        cfg = ForwardConfig(block, 0, warps, split=c, stages=2)
        call = functools.partial(TUNE.run, x, w, None, cfg)
        swap = TUNE.swapped(ops, "FORWARD_SPLIT_STAGED", kernel, call)
        run = TUNE.with_per_sm(per_sm, swap)
        for _ in range(2):  # twice: the counters the first launch left serve the second
            y, _, rstd = run()
            assert_close(y, oracle_y(x, w), dtype, f"y of wide split {block} x {warps}")
            assert torch.equal(y, want) and torch.equal(rstd, want_rstd), (block, warps, per_sm)
    assert ops.FORWARD_SPLIT_STAGED is not kernel  # swapped back


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_word_split_gives_the_package_kernels_bits(dtype, ahead, device):
    """``wide_split.word_forward`` (slot words carrying epoch and partial: no counters, atomics
    or fences), with and without the next chunk loaded ahead: the package split kernel's bits,
    launch after launch (the epochs advance)."""
    if device == "cuda":
        # one program an SM: two of 16384 x 8 warps were refused as a cooperative grid on an
        # H100 ("too many blocks in cooperative launch", 41st session)
        n, cases = 131072 - 3, [(65536 if dtype != torch.float32 else 32768, 32, 1), (16384, 8, 1)]
    else:
        n, cases = 300, [(512, 4, 1)]
    x = torch.randn(40, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    for block, warps, per_sm in cases:
        c = -(-n // block)
        want, _, want_rstd = TUNE.run(x, w, None, ForwardConfig(block, 0, warps, split=c))
        for _ in range(3):
            y, rstd = WIDE.word_forward(x, w, 1e-6, block, warps, per_sm, ahead)
            assert_close(y, oracle_y(x, w), dtype, f"y of word split {block} x {warps}")
            assert torch.equal(y, want) and torch.equal(rstd, want_rstd), (block, warps, per_sm)


@pytest.mark.parametrize("w_early", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cluster_split_gives_the_package_kernels_bits(dtype, w_early, device):
    """``cluster_split.cluster_forward`` (a row over the CTAs of one hardware cluster, launched
    as clusters by the launcher's metadata, one cluster barrier a row): the package split
    kernel's bits, at 2, 4 and 8 CTAs a row on a GPU (the last chunk masked), one on the CPU;
    with the weight loaded between the barrier's arrive and wait too."""
    if device == "cuda":
        n, cases = 131072 - 3, [(65536, 32), (32768, 16), (16384, 8)]
        if dtype == torch.float32:
            cases = [(32768, 32), (16384, 16)]  # 4 and 8 a row (65536 float32 would spill)
    else:
        n, cases = 300, [(512, 4)]
    x = torch.randn(40, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    for block, warps in cases:
        c = -(-n // block)
        want, _, want_rstd = TUNE.run(x, w, None, ForwardConfig(block, 0, warps, split=c))
        for _ in range(2):
            y, rstd = CLUSTER.cluster_forward(x, w, 1e-6, block, warps, w_early)
            assert_close(y, oracle_y(x, w), dtype, f"y of cluster split {block} x {warps}")
            assert torch.equal(y, want) and torch.equal(rstd, want_rstd), (block, warps)


@pytest.mark.parametrize("hold_w", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cluster_walk_gives_the_package_kernels_bits(dtype, hold_w, device):
    """``cluster_forward(walk=...)`` (41st session: clusters walk rows, the next row loaded
    between the barrier's arrive and wait; the weight held or reloaded): the package split
    kernel's bits, with fewer clusters than rows (each walks several, the last ragged)."""
    if device == "cuda":
        n, m = 131072 - 3, 300
        cases = [(16384, 8, 1), (16384, 8, 2), (32768, 32, 1)]
        if dtype == torch.float32:
            cases = [(32768, 32, 1), (16384, 16, 2)]
    else:
        n, m, cases = 300, 7, [(512, 4, 2), (512, 4, 3)]  # 2 and 3 programs over 7 rows
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    for block, warps, walk in cases:
        c = -(-n // block)
        want, _, want_rstd = TUNE.run(x, w, None, ForwardConfig(block, 0, warps, split=c))
        for _ in range(2):
            y, rstd = CLUSTER.cluster_forward(x, w, 1e-6, block, warps, walk=walk, hold_w=hold_w)
            assert_close(y, oracle_y(x, w), dtype, f"y of cluster walk {block} x {warps}")
            assert torch.equal(y, want) and torch.equal(rstd, want_rstd), (block, warps, walk)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cluster_meeting_variants_give_float64s_values(dtype, device):
    """``cluster_forward``'s 42nd-session variants: the partials through DSMEM (``exchange=1``,
    GPU only: inline PTX) give the L2 meeting's bits; x reloaded after the meeting
    (``reload``) gives float64's values, with the first pass one sum (``whole_sum``) too. Not
    the split kernel's bits: on an H100 (43rd session) whole_sum's rstd differed at bf16
    16384 x 8 warps and its y at float32 32768 x 32 (the compiled sum of the reloading kernel
    is not the split kernel's). On the CPU one CTA a row (a ragged chunk)."""
    if device == "cuda":
        n, m, cases = 131072 - 3, 64, [(16384, 8), (32768, 16)]
        if dtype == torch.float32:
            cases = [(32768, 32), (16384, 16)]
    else:
        n, m, cases = 300, 3, [(512, 4)]
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    for block, warps in cases:
        c = -(-n // block)
        want, _, want_rstd = TUNE.run(x, w, None, ForwardConfig(block, 0, warps, split=c))
        variants = [dict(reload=2), dict(reload=4), dict(reload=4, whole_sum=True)]
        if device == "cuda":
            variants += [dict(exchange=1), dict(exchange=1, reload=4, whole_sum=True)]
        for kw in variants:
            y, rstd = CLUSTER.cluster_forward(x, w, 1e-6, block, warps, **kw)
            assert_close(y, oracle_y(x, w), dtype, f"y of cluster {block} x {warps} {kw}")
            if "reload" not in kw:  # the split kernel's order of sums
                assert torch.equal(y, want) and torch.equal(rstd, want_rstd), (block, kw)

"""The Inductor pass's fold of a norm backward's summed dy (GEMM outputs added together) into the
kernel (``inductor_dy_sums``): which graphs it rewrites, which it leaves alone, and that the
rewritten graph computes the graph's values. Graphs come from ``make_fx`` as in
test_inductor_fusion.py; compiled models: tests/integrations/test_transformers_inductor_fusion.py.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch._inductor import config as inductor_config
from torch.fx.experimental.proxy_tensor import make_fx

from rmsnorm_kernel import inductor_fusion as fusion

FWD = torch.ops.rmsnorm_kernel.rmsnorm_fwd.default
BWD = torch.ops.rmsnorm_kernel.rmsnorm_bwd.default
ADD = torch.ops.aten.add.Tensor
M, N, K = 6, 48, 16


def _rewritten(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    new = copy.deepcopy(gm)
    done = fusion.fuse_graph(new.graph)
    new.recompile()
    return gm, new, done["backward_dy_sum"]


def _bwd_call(gm):
    (node,) = [n for n in gm.graph.nodes if n.target is BWD]
    return fusion._arguments(node, BWD)


def _inputs(device, dtype, parts=3):
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(M, K, generator=gen).to(device, dtype) for _ in range(parts)]
    weights = [torch.randn(K, N, generator=gen).to(device, dtype) for _ in range(parts)]
    saved = (torch.randn(M, N, generator=gen) + 2).to(device, dtype)
    w = torch.randn(N, generator=gen).to(device, dtype)
    _, _, rstd = FWD(saved, w, None, 1e-6, 0.0)
    return grads, weights, saved, w, rstd


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("order", ["left", "right"])
def test_gemm_sums_are_read_by_the_kernel(device, parts, order):
    """``(mm_a + mm_b) + mm_c`` (or ``mm_c + (mm_a + mm_b)``): the call reads the three GEMM
    outputs, the adds are gone, and float32 values equal the graph's bit for bit."""
    grads, weights, saved, w, rstd = _inputs(device, torch.float32, parts)

    def fn(grads, weights, saved, w, rstd):
        mms = [g @ wt for g, wt in zip(grads, weights, strict=True)]
        dy = mms[0] + mms[1]
        if parts == 3:
            dy = dy + mms[2] if order == "left" else mms[2] + dy
        return BWD(dy, None, saved, w, rstd, 0.0)

    gm, new, folded = _rewritten(fn, grads, weights, saved, w, rstd)
    assert folded == 1
    assert sum(n.target is ADD for n in new.graph.nodes) == 0
    call = _bwd_call(new)
    assert (call["dy_c"] is None) == (parts == 2) and call["dy_dtype"] is None
    for got, want in zip(
        new(grads, weights, saved, w, rstd), gm(grads, weights, saved, w, rstd), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_widened_bfloat16_gemm_outputs_are_read_narrow(device):
    """Autocast's form: bfloat16 GEMM outputs each widened to float32, summed in float32. The
    kernel reads the bfloat16 outputs and rounds the sum to float32 (``dy_dtype``): the graph's
    values bit for bit."""
    grads, weights, saved, w, rstd = _inputs(device, torch.bfloat16)
    saved32 = saved.float()
    _, _, rstd32 = FWD(saved32, w.float(), None, 1e-6, 0.0)

    def fn(grads, weights, saved, w, rstd):
        mms = [(g @ wt).to(torch.float32) for g, wt in zip(grads, weights, strict=True)]
        return BWD((mms[0] + mms[1]) + mms[2], None, saved, w, rstd, 0.0)

    args = (grads, weights, saved32, w.float(), rstd32)
    gm, new, folded = _rewritten(fn, *args)
    assert folded == 1
    call = _bwd_call(new)
    assert call["dy_dtype"] == torch.float32 and call["dy"].meta["val"].dtype == torch.bfloat16
    for got, want in zip(new(*args), gm(*args), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["pointwise_part", "sum_used_twice", "broadcast", "mixed_dtypes"])
def test_what_is_left_alone(device, case):
    """A part Inductor would have fused unrounded (a pointwise op), a sum needed elsewhere too, a
    broadcast add, parts of two dtypes: no rewrite."""
    grads, weights, saved, w, rstd = _inputs(device, torch.float32, 2)

    def fn(grads, weights, saved, w, rstd):
        a, b = (g @ wt for g, wt in zip(grads, weights, strict=True))
        extra = None
        if case == "pointwise_part":
            dy = a * 2 + b
        elif case == "sum_used_twice":
            dy = a + b
            extra = dy * 3
        elif case == "broadcast":
            dy = a + b[:1]
        else:
            dy = a + grads[1].bfloat16() @ weights[1].bfloat16()  # promoted to float32
        out = BWD(dy, None, saved, w, rstd, 0.0)
        return out if extra is None else (*out, extra)

    _, new, folded = _rewritten(fn, grads, weights, saved, w, rstd)
    assert folded == 0
    assert _bwd_call(new)["dy_b"] is None


def test_emulated_precision_casts_keep_three_part_sums(device):
    """With ``emulate_precision_casts`` Inductor rounds ``a + b`` before adding ``c``: a
    three-part sum is left alone; a two-part one is still read by the kernel."""
    grads, weights, saved, w, rstd = _inputs(device, torch.bfloat16)

    def three(grads, weights, saved, w, rstd):
        mms = [g @ wt for g, wt in zip(grads, weights, strict=True)]
        return BWD((mms[0] + mms[1]) + mms[2], None, saved, w, rstd, 0.0)

    def two(grads, weights, saved, w, rstd):
        mms = [g @ wt for g, wt in zip(grads, weights, strict=True)]
        return BWD(mms[0] + mms[1], None, saved, w, rstd, 0.0)

    with inductor_config.patch(emulate_precision_casts=True):
        assert _rewritten(three, grads, weights, saved, w, rstd)[2] == 0
        assert _rewritten(two, grads[:2], weights[:2], saved, w, rstd)[2] == 1


def test_a_sum_of_one_value_with_itself(device):
    """``c + c`` with ``c`` one widened GEMM output (one node used twice): read as two parts of
    the same tensor, the conversion removed once; the graph's values."""
    grads, weights, saved, w, rstd = _inputs(device, torch.bfloat16, 1)
    saved32 = saved.float()
    _, _, rstd32 = FWD(saved32, w.float(), None, 1e-6, 0.0)

    def fn(g, wt, saved, w, rstd):
        c = (g @ wt).to(torch.float32)
        return BWD(c + c, None, saved, w, rstd, 0.0)

    args = (grads[0], weights[0], saved32, w.float(), rstd32)
    gm, new, folded = _rewritten(fn, *args)
    assert folded == 1
    call = _bwd_call(new)
    assert call["dy"] is call["dy_b"] and call["dy_c"] is None
    for got, want in zip(new(*args), gm(*args), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)

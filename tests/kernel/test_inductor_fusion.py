"""The Inductor pass that folds the residual add and the gradient accumulation into our kernels.

Graph-level tests build post-grad-like FX graphs with ``make_fx`` (fake tensors give every node
the ``val`` metadata Inductor's graphs carry), rewrite them with ``fuse_graph`` and run both
versions on real tensors; one test runs the pass inside ``torch.compile`` end to end.
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import TOLERANCES, assert_close
from torch._inductor import config as inductor_config
from torch.fx.experimental.proxy_tensor import make_fx

import rmsnorm_kernel as rk
from rmsnorm_kernel import inductor_fusion as fusion

FWD = torch.ops.rmsnorm_kernel.rmsnorm_fwd.default
BWD = torch.ops.rmsnorm_kernel.rmsnorm_bwd.default
ADD = torch.ops.aten.add.Tensor


def _trace(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def _count(gm, target):
    return sum(1 for n in gm.graph.nodes if n.target is target)


def _fused(gm):
    """A rewritten copy of ``gm`` and what was done."""
    import copy

    new = copy.deepcopy(gm)
    done = fusion.fuse_graph(new.graph)
    new.recompile()
    return new, done


def _only(**counts):
    """A ``fuse_graph`` result: these counts, every other kind 0."""
    return {kind: counts.get(kind, 0) for kind in fusion.REWRITES}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_residual_add_is_folded_bit_for_bit(device, dtype):
    llama = dtype is torch.bfloat16

    def fn(a, b, w):
        h = a + b
        y, _, rstd = FWD(h, w, None, 1e-6, 0.0, llama)
        return y, rstd, h * 2  # h has another user: it must get the kernel's h

    a, b = (torch.randn(6, 80, device=device, dtype=dtype) for _ in range(2))
    w = torch.randn(80, device=device, dtype=dtype)
    gm = _trace(fn, a, b, w)
    new, done = _fused(gm)
    assert done == _only(forward_residual=1)
    assert _count(new, ADD) == 0 and _count(new, FWD) == 1
    h = a + b  # the kernel rounds to nearest, as PyTorch (the interpreter too: backend.py)
    y, _, rstd = FWD(h, w, None, 1e-6, 0.0, llama)
    for got, want in zip(new(a, b, w), (y, rstd, h * 2), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    for got, want in zip(new(a, b, w), gm(a, b, w), strict=True):  # the graph's own values
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("swap", [False, True])
def test_forward_folds_a_narrower_residual_bit_for_bit(device, swap):
    """float32 stream + bfloat16 block output (autocast's residual add): the float32 operand is
    the kernel's x, in either order of the add; the values are the graph's own."""

    def fn(a, b, w):
        h = b + a if swap else a + b
        y, _, rstd = FWD(h, w, None, 1e-6, 0.0, False)
        return y, rstd, h

    a = torch.randn(6, 80, device=device)
    b = torch.randn(6, 80, device=device, dtype=torch.bfloat16)
    w = torch.randn(80, device=device)
    gm = _trace(fn, a, b, w)
    new, done = _fused(gm)
    assert done["forward_residual"] == 1 and _count(new, ADD) == 0
    (node,) = [n for n in new.graph.nodes if n.target is FWD]
    assert node.args[0].meta["val"].dtype == torch.float32  # x: the float32 operand
    for got, want in zip(new(a, b, w), gm(a, b, w), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_backward_accumulation_is_folded(device):
    def fn(dy, g, saved, w, rstd):
        dx, dw, _ = BWD(dy, None, saved, w, rstd, 0.0, False)
        return dx + g, dw

    m, n = 7, 96
    x = torch.randn(m, n, device=device)
    w = torch.randn(n, device=device)
    _, _, rstd = FWD(x, w, None, 1e-6, 0.0, False)
    dy, g = torch.randn(m, n, device=device), torch.randn(m, n, device=device)
    gm = _trace(fn, dy, g, x, w, rstd)
    new, done = _fused(gm)
    assert done == _only(backward_accumulate=1)
    assert _count(new, ADD) == 0
    (node,) = [n for n in new.graph.nodes if n.target is BWD]
    assert node.args[1] is not None, "g must reach the kernel as dh"
    got, want = new(dy, g, x, w, rstd), gm(dy, g, x, w, rstd)
    assert_close(got[0], want[0], torch.float32, "dx + g")
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)  # dweight: untouched


def test_backward_waits_for_a_later_gradient(device):
    """g is computed after the norm's backward: the call moves after it, unless another output's
    user would then come before the call."""

    def later(dy, z, saved, w, rstd):
        dx, dw, _ = BWD(dy, None, saved, w, rstd, 0.0, False)
        g = torch.sin(z)
        return dx + g, dw * 2

    def blocked(dy, z, saved, w, rstd):
        dx, dw, _ = BWD(dy, None, saved, w, rstd, 0.0, False)
        dw2 = dw * 2
        g = torch.sin(z + dw2.sum())
        return dx + g, dw2

    x = torch.randn(5, 64, device=device)
    w = torch.randn(64, device=device)
    _, _, rstd = FWD(x, w, None, 1e-6, 0.0, False)
    dy, z = torch.randn(5, 64, device=device), torch.randn(5, 64, device=device)
    gm = _trace(later, dy, z, x, w, rstd)
    new, done = _fused(gm)
    assert done["backward_accumulate"] == 1
    for got, want in zip(new(dy, z, x, w, rstd), gm(dy, z, x, w, rstd), strict=True):
        assert_close(got, want, torch.float32, "later g")
    _, done = _fused(_trace(blocked, dy, z, x, w, rstd))
    assert done["backward_accumulate"] == 0


@pytest.mark.parametrize("case", ["broadcast", "alpha", "promotion", "dx_used_twice", "dh_set"])
def test_what_is_left_alone(device, case):
    n = 48
    w = torch.randn(n, device=device)

    def fwd_case(a, b, w):
        h = {
            "broadcast": lambda: a + b[0],
            "alpha": lambda: torch.add(a, b, alpha=2),
            "promotion": lambda: a.half() + b.to(torch.bfloat16),  # float32: neither's dtype
        }[case]()
        return FWD(h, w, None, 1e-6, 0.0, False)[0]

    def bwd_case(dy, g, saved, w, rstd):
        dh = g if case == "dh_set" else None
        dx, _, _ = BWD(dy, dh, saved, w, rstd, 0.0, False)
        return (dx + g, dx * 3) if case == "dx_used_twice" else dx + g

    a, b = torch.randn(4, n, device=device), torch.randn(4, n, device=device)
    if case in ("broadcast", "alpha", "promotion"):
        _, done = _fused(_trace(fwd_case, a, b, w))
    else:
        _, _, rstd = FWD(a, w, None, 1e-6, 0.0, False)
        _, done = _fused(_trace(bwd_case, b, b.flip(0), a, w, rstd))
    assert done == _only()


def test_pass_installs_chains_and_restores(fresh_inductor):
    seen = []

    class Before(fusion.CustomGraphPass):
        def __call__(self, graph):
            seen.append(graph)

        def uuid(self):
            return "before"

    inductor_config.post_grad_custom_post_pass = before = Before()
    fusion.enable()
    fusion.enable()  # idempotent: one wrapper
    ours = inductor_config.post_grad_custom_post_pass
    assert fusion.enabled() and ours.previous is before
    assert ours.uuid().endswith(":before")
    graph = torch.fx.Graph()
    ours(graph)
    assert seen == [graph], "the pass set before still runs"
    fusion.disable()
    assert inductor_config.post_grad_custom_post_pass is before
    assert fusion.RMSNormFusionPass().uuid() == fusion.RMSNormFusionPass().uuid()
    # a list of passes (torch 2.13 accepts one there, 2.11 does not) runs in order; a pass
    # without a uuid gives no cache key
    listed = fusion.RMSNormFusionPass([before, Before()])
    listed(graph)
    assert len(seen) == 3 and listed.uuid().endswith(":before:before")
    assert fusion.RMSNormFusionPass([lambda graph: None]).uuid() is None


@pytest.mark.parametrize(
    ("dynamic", "how"), [(False, "enable"), (True, "enable"), (False, "options")]
)
def test_compiled_residual_block_uses_the_rewrites(device, fresh_inductor, dynamic, how):
    """A two-norm residual block under torch.compile: both rewrites happen, the kernels still
    run once per norm and pass, and the results match eager (float32 tolerances); with symbolic
    sizes too, and with the pass given in one compile's options instead of globally."""

    def block(x, w1, w2, lin):
        h = x + torch.tanh(lin(rk.rmsnorm(x, w1, 1e-6)))
        return h + torch.tanh(lin(rk.rmsnorm(h, w2, 1e-6)))

    lin = torch.nn.Linear(64, 64, bias=False, device=device)
    x = torch.randn(2, 6, 64, device=device, requires_grad=True)
    w1 = torch.randn(64, device=device, requires_grad=True)
    w2 = torch.randn(64, device=device, requires_grad=True)
    before = dict(fusion.REWRITES)
    options = None
    if how == "enable":
        fusion.enable()
    else:
        options = {"post_grad_custom_post_pass": fusion.RMSNormFusionPass()}
    out = torch.compile(block, dynamic=dynamic, options=options)(x, w1, w2, lin)
    rk.reset_calls()
    out.square().sum().backward()
    assert fusion.REWRITES["forward_residual"] - before["forward_residual"] == 1
    assert fusion.REWRITES["backward_accumulate"] - before["backward_accumulate"] == 2
    assert rk.CALLS["backward"] == 2
    got = [t.grad.clone() for t in (x, w1, w2)]
    for t in (x, w1, w2):
        t.grad = None
    eager = block(x, w1, w2, lin)
    eager.square().sum().backward()
    assert_close(out, eager, torch.float32, "y")
    for g, t, name in zip(got, (x, w1, w2), ("dx", "dw1", "dw2"), strict=True):
        torch.testing.assert_close(
            g, t.grad, **TOLERANCES[torch.float32], msg=lambda m, name=name: f"{name}: {m}"
        )


def test_compiled_block_under_autocast(device, fresh_inductor):
    """bfloat16 autocast: the float32 residual stream plus a bfloat16 block output is folded
    too, the casts around the norms go into the kernels, and the compiled block computes the
    eager block's values."""

    def block(x, w1, w2, lin):
        h = x + lin(rk.rmsnorm(x, w1, 1e-6))
        return h + lin(rk.rmsnorm(h, w2, 1e-6))

    lin = torch.nn.Linear(64, 64, bias=False, device=device)
    x = torch.randn(2, 6, 64, device=device, requires_grad=True)
    w1 = torch.randn(64, device=device, requires_grad=True)
    w2 = torch.randn(64, device=device, requires_grad=True)
    options = {"post_grad_custom_post_pass": fusion.RMSNormFusionPass()}
    before = dict(fusion.REWRITES)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = torch.compile(block, options=options)(x, w1, w2, lin)
    out.float().square().sum().backward()
    done = {k: fusion.REWRITES[k] - before[k] for k in before}
    # and each norm's float32 output cast to bfloat16 for the linear layer: stored as bfloat16 by
    # the kernel, the cast's gradient read unwidened; h's gradient (the second norm's dx) is also
    # the first linear layer's output gradient, cast to bfloat16: stored by the kernel too
    assert done == _only(
        forward_residual=1,
        backward_accumulate=2,
        forward_cast=2,
        backward_cast=2,
        backward_dx_cast=1,
    )
    got = x.grad.clone()
    x.grad = None
    with torch.autocast(device, dtype=torch.bfloat16):
        eager = block(x, w1, w2, lin)
    eager.float().square().sum().backward()
    assert out.dtype == eager.dtype == torch.float32
    assert_close(out, eager, torch.float32, "y")
    assert_close(got, x.grad, torch.float32, "dx")


def test_forward_cast_is_stored_by_the_kernel(device):
    """A float32 norm output used only through a cast to bfloat16 (autocast's GEMM input): the
    kernel stores bfloat16 itself, bit for bit the cast's values; the backward's gradient of
    that cast (bfloat16 widened to float32) reaches the kernel unwidened, with the same dx and
    dweight bits."""

    def fn(x, w, g):
        y, _, rstd = FWD(x, w, None, 1e-6, 0.0, True)
        low = y.to(torch.bfloat16)
        dx, dw, _ = BWD(g.to(torch.float32), None, x, w, rstd, 0.0, True)
        return low * 2, low + 1, dx, dw

    x, w = torch.randn(6, 96, device=device), torch.randn(96, device=device)
    g = torch.randn(6, 96, device=device).to(torch.bfloat16)
    gm = _trace(fn, x, w, g)
    new, done = _fused(gm)
    assert done == _only(forward_cast=1, backward_cast=1)
    (fwd,) = [n for n in new.graph.nodes if n.target is FWD]
    assert fwd.kwargs.get("out_dtype") is torch.bfloat16
    (bwd,) = [n for n in new.graph.nodes if n.target is BWD]
    assert fusion._val(bwd.args[0]).dtype is torch.bfloat16
    for got, want in zip(new(x, w, g), gm(x, w, g), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dh", [False, True])
def test_dx_cast_is_stored_by_the_kernel(device, dh):
    """A float32 dx used as it is (the residual stream's gradient) and through casts to bfloat16
    (the GEMMs' input gradient under autocast): the kernel stores the bfloat16 copy as a third
    output, bit for bit the casts' values, and the casts are gone."""

    def fn(x, w, g, h):
        _, _, rstd = FWD(x, w, None, 1e-6, 0.0, False)
        dx, dw, _ = BWD(g, h if dh else None, x, w, rstd, 0.0, False)
        return dx * 3, dx.to(torch.bfloat16) * 2, dx.to(torch.bfloat16) + 1, dw

    x, w = torch.randn(6, 96, device=device), torch.randn(96, device=device)
    g, h = torch.randn(6, 96, device=device), torch.randn(6, 96, device=device)
    gm = _trace(fn, x, w, g, h)
    new, done = _fused(gm)
    assert done == _only(backward_dx_cast=1)
    (bwd,) = [n for n in new.graph.nodes if n.target is BWD]
    assert fusion._arguments(bwd, BWD)["dx2_dtype"] is torch.bfloat16
    assert not [n for n in new.graph.nodes if fusion._cast_to(n) is not None]
    for got, want in zip(new(x, w, g, h), gm(x, w, g, h), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["two_targets", "float64", "16bit_dx"])
def test_dx_casts_left_alone(device, case):
    """Only where dx is float32 and every cast goes to one narrower dtype."""
    dtype = torch.bfloat16 if case == "16bit_dx" else torch.float32

    def fn(x, w, g):
        _, _, rstd = FWD(x, w, None, 1e-6, 0.0, False)
        dx, dw, _ = BWD(g, None, x, w, rstd, 0.0, False)
        if case == "two_targets":
            return dx.to(torch.bfloat16), dx.to(torch.float16), dw
        if case == "float64":
            return dx.to(torch.float64), dw
        return dx.to(torch.float32), dw

    x, w = torch.randn(6, 96, device=device).to(dtype), torch.randn(96, device=device)
    g = torch.randn(6, 96, device=device).to(dtype)
    _, done = _fused(_trace(fn, x, w, g))
    assert done["backward_dx_cast"] == 0


@pytest.mark.parametrize("case", ["also_float32", "two_targets", "widening", "float16_stream"])
def test_casts_left_alone(device, case):
    """Only an exact rewrite: every user of y a cast to one narrower dtype, y in the kernel's
    accumulator dtype; a backward dy cast from a wider dtype or none stays as it is."""
    dtype = torch.bfloat16 if case == "widening" else torch.float32

    def fn(x, w):
        y = FWD(x, w, None, 1e-6, 0.0, False)[0]
        if case == "also_float32":
            return y.to(torch.bfloat16), y * 2
        if case == "two_targets":
            return y.to(torch.bfloat16), y.to(torch.float16)
        if case == "widening":
            return (y.float(),)
        return (y.to(torch.float16).to(torch.bfloat16),)  # float16_stream: one cast, then another

    x = torch.randn(4, 64, device=device, dtype=dtype)
    w = torch.randn(64, device=device, dtype=dtype)
    gm = _trace(fn, x, w)
    new, done = _fused(gm)
    assert done["forward_cast"] == (1 if case == "float16_stream" else 0)
    for got, want in zip(new(x, w), gm(x, w), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)

"""``RMSNormFusionPass(gemm_sums=True)``: the sum of GEMM outputs that forms a norm backward's
``dy`` is folded into GEMM epilogues (``addmm``). Graph-level tests trace post-grad-like graphs
with ``make_fx`` (as test_inductor_fusion does) and run the rewritten graph on real tensors."""

from __future__ import annotations

import copy

import pytest
import torch
from kernel_helpers import TOLERANCES
from torch.fx.experimental.proxy_tensor import make_fx

import rmsnorm_kernel as rk
from rmsnorm_kernel import inductor_fusion as fusion

FWD = torch.ops.rmsnorm_kernel.rmsnorm_fwd.default
BWD = torch.ops.rmsnorm_kernel.rmsnorm_bwd.default
ADD = torch.ops.aten.add.Tensor
MM = torch.ops.aten.mm.default
ADDMM = torch.ops.aten.addmm.default
N, K = 48, 32


def _count(gm, target):
    return sum(1 for n in gm.graph.nodes if n.target is target)


def _rewritten(fn, args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    new = copy.deepcopy(gm)
    done = fusion.fuse_graph(new.graph, gemm_sums=True)
    new.recompile()
    return gm, new, done


def _inputs(device, dtype=torch.float32, grads=3):
    gen = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=gen).to(device, dtype)

    x = t(2, 8, N)
    w = t(N)
    _, _, rstd = FWD(x, w, None, 1e-6, 0.0, False)
    gs = [t(16, K) for _ in range(grads)]
    ws = [t(K, N) for _ in range(grads)]
    return x, w, rstd, gs, ws


def _close(got, want, what):
    torch.testing.assert_close(got, want, **TOLERANCES[torch.float32], msg=lambda m: f"{what}: {m}")


def test_three_gemm_sum_becomes_an_addmm_chain(device):
    """q, k and v's input gradients summed into dy: two additions, two addmm, same values."""
    x, w, rstd, gs, ws = _inputs(device)

    def fn(x, w, rstd, g0, g1, g2, w0, w1, w2):
        dy = (g0 @ w0).view(2, 8, N) + (g1 @ w1).view(2, 8, N) + (g2 @ w2).view(2, 8, N)
        return BWD(dy, None, x, w, rstd, 0.0, False)

    args = (x, w, rstd, *gs, *ws)
    gm, new, done = _rewritten(fn, args)
    assert done["backward_gemm_sum"] == 2
    assert _count(new, ADD) == 0 and _count(new, ADDMM) == 2 and _count(new, MM) == 1
    for got, want, what in zip(new(*args), gm(*args), ("dx", "dw", "dx2"), strict=True):
        _close(got, want, what)


def test_a_product_used_elsewhere_is_the_addend(device):
    """One product has another user: the other GEMM accumulates into it (addmm reads it, leaves
    it as it was)."""
    x, w, rstd, gs, ws = _inputs(device, grads=2)

    def fn(x, w, rstd, g0, g1, w0, w1):
        p = g0 @ w0
        return BWD(p.view(2, 8, N) + (g1 @ w1).view(2, 8, N), None, x, w, rstd, 0.0, False), p

    args = (x, w, rstd, *gs, *ws)
    gm, new, done = _rewritten(fn, args)
    assert done["backward_gemm_sum"] == 1 and _count(new, MM) == 1
    (dx, dw, _), p = new(*args)
    (dx_ref, dw_ref, _), p_ref = gm(*args)
    assert torch.equal(p, p_ref)
    _close(dx, dx_ref, "dx")
    _close(dw, dw_ref, "dw")


def test_a_two_dim_sum_reshaped_into_dy_is_folded_too(device):
    x, w, rstd, gs, ws = _inputs(device, grads=2)

    def fn(x, w, rstd, g0, g1, w0, w1):
        return BWD((g0 @ w0 + g1 @ w1).view(2, 8, N), None, x, w, rstd, 0.0, False)

    args = (x, w, rstd, *gs, *ws)
    gm, new, done = _rewritten(fn, args)
    assert done["backward_gemm_sum"] == 1 and _count(new, ADD) == 0
    for got, want, what in zip(new(*args), gm(*args), ("dx", "dw", "dx2"), strict=True):
        _close(got, want, what)


def test_left_alone_where_the_sum_or_the_product_has_other_users(device):
    x, w, rstd, gs, ws = _inputs(device, grads=2)

    def sum_used_twice(x, w, rstd, g0, g1, w0, w1):
        dy = (g0 @ w0).view(2, 8, N) + (g1 @ w1).view(2, 8, N)
        return BWD(dy, None, x, w, rstd, 0.0, False), dy

    def products_used_twice(x, w, rstd, g0, g1, w0, w1):  # (one is enough: the test above)
        p, q = g0 @ w0, g1 @ w1
        return BWD(p.view(2, 8, N) + q.view(2, 8, N), None, x, w, rstd, 0.0, False), p, q

    def scaled(x, w, rstd, g0, g1, w0, w1):  # alpha: not a plain sum
        dy = torch.add((g0 @ w0).view(2, 8, N), (g1 @ w1).view(2, 8, N), alpha=2.0)
        return BWD(dy, None, x, w, rstd, 0.0, False)

    for fn in (sum_used_twice, products_used_twice, scaled):
        _, new, done = _rewritten(fn, (x, w, rstd, *gs, *ws))
        assert done["backward_gemm_sum"] == 0, fn.__name__
        assert _count(new, ADDMM) == 0, fn.__name__


def test_left_alone_across_dtypes(device):
    """A float32 gradient plus a 16-bit product: the add promotes, an addmm would not."""
    x, w, rstd, gs, ws = _inputs(device, grads=1)
    g16, w16 = gs[0].half(), ws[0].half()
    other = torch.randn(16, N, device=device)

    def fn(x, w, rstd, g, wt, other):
        dy = (g @ wt) + other
        return BWD(dy.view(2, 8, N), None, x, w, rstd, 0.0, False)

    _, new, done = _rewritten(fn, (x, w, rstd, g16, w16, other))
    assert done["backward_gemm_sum"] == 0 and _count(new, ADD) == 1


def test_off_by_default_and_keyed_in_the_uuid():
    assert fusion.RMSNormFusionPass().gemm_sums is False
    assert fusion.RMSNormFusionPass().uuid() != fusion.RMSNormFusionPass(gemm_sums=True).uuid()
    with pytest.raises(TypeError, match="gemm_sums must be True or False"):
        fusion.RMSNormFusionPass(gemm_sums=1)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_block_with_two_consumers_of_each_norm(device, fresh_inductor, dynamic):
    """Each norm's output feeds two linear layers (as gate and up): under torch.compile with
    ``gemm_sums=True`` each dy sum is one addmm, and gradients match eager (with symbolic
    sizes too)."""

    def block(x, w1, w2, a, b):
        y = rk.rmsnorm(x, w1, 1e-6)
        h = x + torch.tanh(a(y)) * b(y)
        z = rk.rmsnorm(h, w2, 1e-6)
        return h + torch.tanh(a(z)) * b(z)

    a = torch.nn.Linear(64, 64, bias=False, device=device)
    b = torch.nn.Linear(64, 64, bias=False, device=device)
    x = torch.randn(2, 6, 64, device=device, requires_grad=True)
    w1 = torch.randn(64, device=device, requires_grad=True)
    w2 = torch.randn(64, device=device, requires_grad=True)
    options = {"post_grad_custom_post_pass": fusion.RMSNormFusionPass(gemm_sums=True)}
    before = dict(fusion.REWRITES)
    out = torch.compile(block, dynamic=dynamic, options=options)(x, w1, w2, a, b)
    out.square().sum().backward()
    assert fusion.REWRITES["backward_gemm_sum"] - before["backward_gemm_sum"] == 2
    got = [t.grad.clone() for t in (x, w1, w2)]
    for t in (x, w1, w2):
        t.grad = None
    block(x, w1, w2, a, b).square().sum().backward()
    for g, t, what in zip(got, (x, w1, w2), ("dx", "dw1", "dw2"), strict=True):
        _close(g, t.grad, what)

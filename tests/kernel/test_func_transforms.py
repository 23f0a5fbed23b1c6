"""``torch.func`` transforms and forward-mode AD through ``rmsnorm`` (``transforms.py``).

Before this path, ``torch.func.grad`` / ``vmap`` / ``jvp`` raised inside PyTorch, and forward-mode
AD (``torch.autograd.forward_ad``) silently returned no tangent. References: the same transform of
``F.rms_norm`` (or of the float64 reference with Llama's rounding), in float64; and, for the
jvp and the backward, each other (``jacfwd`` is built from the jvp, ``jacrev`` from the backward).
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from kernel_helpers import TOLERANCES, loosest

import rmsnorm_kernel as rk
from rmsnorm_kernel import transforms

DEVICE = "cuda" if rk.BACKEND == "cuda" else "cpu"
EPS = 1e-6
N = 24


def _inputs(dtype, m=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, N, generator=gen, dtype=torch.float64).to(DEVICE, dtype)
    w = (1 + 0.5 * torch.randn(N, generator=gen, dtype=torch.float64)).to(DEVICE, dtype)
    t = torch.randn(m, N, generator=gen, dtype=torch.float64).to(DEVICE, dtype)
    return x, w, t


def ours(x, w):
    return rk.rmsnorm(x, w, EPS)


def torch_ref(x, w):
    return F.rms_norm(x, (N,), w, EPS)


def _pairs(a, b):
    """The leaves of two pytrees of tensors, side by side (the same count, or a failure)."""
    return zip(torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b), strict=True)


def _close(a, b, dtype):
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(a.double(), b.double(), atol=tol["atol"], rtol=tol["rtol"])


TRANSFORMS = {
    "grad": lambda f, x, w, t: torch.func.grad(lambda a, b: (f(a, b) * t).sum(), (0, 1))(x, w),
    "vjp": lambda f, x, w, t: torch.func.vjp(f, x, w)[1](t),
    "jvp": lambda f, x, w, t: torch.func.jvp(f, (x, w), (t, w * 0.5)),
    "jacrev": lambda f, x, w, t: torch.func.jacrev(f, (0, 1))(x[0], w),
    "jacfwd": lambda f, x, w, t: torch.func.jacfwd(f, (0, 1))(x[0], w),
    "hessian": lambda f, x, w, t: torch.func.hessian(lambda a: (f(a, w) * t[0]).sum())(x[0]),
    "vmap dim 0": lambda f, x, w, t: torch.func.vmap(f, (0, None))(x, w),
    "vmap dim 1": lambda f, x, w, t: torch.func.vmap(f, (1, None))(x.T.contiguous(), w),
    "per-sample grads": lambda f, x, w, t: torch.func.vmap(
        torch.func.grad(lambda a, b, c: (f(a, b) * c).sum(), (0, 1)), (0, None, 0)
    )(x, w, t),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_transform_matches_f_rms_norm(name, dtype):
    x, w, t = _inputs(dtype)
    got = TRANSFORMS[name](ours, x, w, t)
    want = TRANSFORMS[name](torch_ref, x.double(), w.double(), t.double())
    for g, r in _pairs(got, want):
        assert g.dtype == dtype
        _close(g, r, dtype)


def test_vmap_forward_is_the_kernel_bit_for_bit():
    """The batching rule moves the batch dim first and launches once: each row's bits are the
    plain call's."""
    x, w, _ = _inputs(torch.float32, m=5)
    base = rk.rmsnorm(x, w, EPS)
    assert torch.equal(torch.func.vmap(ours, (0, None))(x, w), base)
    assert torch.equal(torch.func.vmap(ours, (1, None))(x.T.contiguous(), w), base)


@pytest.mark.parametrize("no_grad", [False, True])
def test_forward_ad_tangent_is_computed(no_grad):
    """The bug this path fixes: a dual x took the eager fast path and lost its tangent."""
    x, w, t = _inputs(torch.float64)
    with torch.no_grad() if no_grad else torch.enable_grad(), fwAD.dual_level():
        y = fwAD.unpack_dual(ours(fwAD.make_dual(x, t), w))
        want = fwAD.unpack_dual(torch_ref(fwAD.make_dual(x, t), w))
    assert y.tangent is not None
    torch.testing.assert_close(y.primal, want.primal)
    torch.testing.assert_close(y.tangent, want.tangent)


def test_no_dual_level_keeps_the_fast_path():
    x, w, _ = _inputs(torch.float32)
    assert not transforms.needed(x, w, None)
    with fwAD.dual_level():
        assert not transforms.needed(x, w, None)  # a level, but no tangent on the inputs
        assert transforms.needed(fwAD.make_dual(x, x), w, None)


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
def test_a_tensor_kept_from_a_finished_transform_is_read_as_f_rms_norm_reads_it(grad_mode):
    """x, weight and residual stored from inside a finished ``torch.func.grad`` ("dead"
    wrappers, as a hook or closure keeps them) hold no storage: the kernels read the tensors
    they wrap, as F.rms_norm does. The no-grad path used to fail ("Cannot access storage of
    TensorWrapper"); with grad, the gradients reach the wrapped leaves."""
    x0, w0, r0 = _inputs(torch.float32)
    kept = []

    def f(x, w, r):
        kept.extend((x, w, r))
        return (x * w + r).sum()

    torch.func.grad(f, argnums=(0, 1, 2))(x0, w0, r0)
    x, w, r = kept
    assert torch._C._functorch.is_functorch_wrapped_tensor(x)
    with torch.set_grad_enabled(grad_mode):
        y = rk.rmsnorm(x, w, EPS)
        y2, h = rk.rmsnorm(x, w, EPS, residual=r)
    assert torch.equal(y, rk.rmsnorm(x0, w0, EPS))
    assert torch.equal(y2, rk.rmsnorm(x0, w0, EPS, residual=r0)[0]) and torch.equal(h, x0 + r0)
    torch.testing.assert_close(y, torch_ref(x0, w0), **TOLERANCES[torch.float32])
    assert y.requires_grad is False  # the transform's inputs were not leaves needing grad
    leaf = w0.clone().requires_grad_()
    with torch.set_grad_enabled(grad_mode):
        out = rk.rmsnorm(x, leaf, EPS)
    assert out.requires_grad is grad_mode
    if grad_mode:
        (dw,) = torch.autograd.grad(out, leaf, torch.ones_like(out))
        ref = leaf.detach().requires_grad_()
        (want,) = torch.autograd.grad(torch_ref(x0, ref), ref, torch.ones_like(out))
        torch.testing.assert_close(dw, want, **TOLERANCES[torch.float32])


def _jacobians(f, *args):
    """``(jacfwd, jacrev)`` of ``f`` at ``args``, w.r.t. every arg: built from the jvp and from
    the backward respectively."""
    idx = tuple(range(len(args)))
    return torch.func.jacfwd(f, idx)(*args), torch.func.jacrev(f, idx)(*args)


def _llama_ref(x, w, residual=None, offset=0.0):
    """Hugging Face's LlamaRMSNorm with the rounding straight-through (what both of our
    derivative formulas take), in float64 apart from the rounding to x's dtype."""
    h = x if residual is None else x + residual
    hd = h.double()
    n = hd * torch.rsqrt(hd.square().mean(-1, keepdim=True) + EPS)
    n = n + (n.to(x.dtype).double() - n).detach()
    return n * (w.double() + offset)


@pytest.mark.parametrize("rounding", ["torch", "llama"])
@pytest.mark.parametrize("residual", [False, True])
def test_jvp_and_backward_agree_with_residual_and_rounding(rounding, residual):
    """jacfwd (the jvp formula) equals jacrev (the backward formula) for every output, and both
    match the float64 formula, residual and Llama rounding included (float16 x, float32 weight:
    the output is float32 under Llama's rule)."""
    x, w, _ = _inputs(torch.float16, m=2, seed=3)
    w = w.float()
    r = _inputs(torch.float16, m=2, seed=4)[0]

    def f(a, b, c):
        out = rk.rmsnorm(a, b, EPS, residual=c if residual else None, rounding=rounding)
        return out if residual else (out,)

    fwd, rev = _jacobians(f, x[0], w, r[0])
    for jf, jr in _pairs(fwd, rev):
        # Each Jacobian is rounded to its output's (jacfwd) or input's (jacrev) dtype: checked at
        # the looser of the two (float32 for the weight's under Llama's rule).
        _close(jf, jr, loosest(jf.dtype, jr.dtype))

    def ref(a, b, c):
        h = a + c if residual else a
        if rounding == "llama":
            y = _llama_ref(h, b)
        else:
            y = F.rms_norm(h.double(), (N,), b.double(), EPS)
        return (y, h.double()) if residual else (y,)

    want = torch.func.jacrev(ref, (0, 1, 2))(x[0].double(), w.double(), r[0].double())
    for jr, jw in _pairs(rev, want):
        _close(jr, jw, torch.float16)


def test_backward_under_grad_matches_the_triton_backward():
    """torch.func.grad (PyTorch-ops backward) against plain autograd (the Triton backward)."""
    x, w, t = _inputs(torch.float32, m=4)
    gx, gw = torch.func.grad(lambda a, b: (ours(a, b) * t).sum(), (0, 1))(x, w)
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(ours(xa, wa), (xa, wa), t)
    _close(gx, ex, torch.float32)
    _close(gw, ew, torch.float32)


def test_module_per_sample_gradients_with_functional_call():
    """The usual per-sample-gradient recipe over rk.RMSNorm's parameters."""
    norm = rk.RMSNorm(N, eps=EPS).to(DEVICE)
    x, _, t = _inputs(torch.float32, m=4)
    params = {k: v.detach() for k, v in norm.named_parameters()}

    def loss(p, a, c):
        return (torch.func.functional_call(norm, p, (a,)) * c).sum()

    per_sample = torch.func.vmap(torch.func.grad(loss), (None, 0, 0))(params, x, t)["weight"]
    for i in range(x.shape[0]):
        norm.zero_grad()
        loss(dict(norm.named_parameters()), x[i], t[i]).backward()
        _close(per_sample[i], norm.weight.grad, torch.float32)


@pytest.mark.parametrize("residual", [False, True])
def test_batched_weight_matches_a_loop(residual):
    """A weight batched with x (and residual): each batch element with its own weight, bit for
    bit the plain call's."""
    x, w, r = _inputs(torch.float32, m=3)
    ws = torch.stack([w, w * 0.5, w + 1])

    def f(a, b, c):
        return rk.rmsnorm(a, b, EPS, residual=c if residual else None)

    got = torch.func.vmap(f)(x, ws, r)
    for i in range(3):
        want = f(x[i], ws[i], r[i])
        for g, e in _pairs(got, want):
            assert torch.equal(g[i], e)


def test_model_ensemble_with_stacked_module_state():
    """PyTorch's model-ensembling recipe over rk.RMSNorm modules (every parameter batched),
    forward and per-model weight gradients, against each model run on its own."""
    models = [rk.RMSNorm(N, eps=EPS).to(DEVICE) for _ in range(3)]
    with torch.no_grad():
        for i, m in enumerate(models):
            m.weight.mul_(1 + 0.1 * i)
    params, buffers = torch.func.stack_module_state(models)
    base = rk.RMSNorm(N, eps=EPS).to("meta")
    x, _, t = _inputs(torch.float32, m=4)

    def loss(p, b, a):
        return (torch.func.functional_call(base, (p, b), (a,)) * t).sum()

    grads = torch.func.vmap(torch.func.grad(loss), (0, 0, None))(params, buffers, x)
    for i, m in enumerate(models):
        m.zero_grad()
        loss(dict(m.named_parameters()), {}, x).backward()
        _close(grads["weight"][i], m.weight.grad, torch.float32)


@pytest.mark.parametrize("name", ["grad", "jvp", "jacfwd", "vmap dim 1", "per-sample grads"])
def test_a_compiled_transform_matches_f_rms_norms(name):
    """torch.compile of a transform (fullgraph): Dynamo inlines the transform, where the
    registered op's autograd has no functorch rule (grad failed, jvp's tangent came out zero):
    the norm is traced as its formula in PyTorch ops, and gives what F.rms_norm gives."""
    x, w, t = _inputs(torch.float32)

    def compiled(f):
        torch._dynamo.reset()
        return torch.compile(lambda a, b, c: TRANSFORMS[name](f, a, b, c), fullgraph=True)

    try:
        compiled(torch_ref)(x, w, t)
    except Exception as e:  # noqa: BLE001 - which error is the point
        # This torch cannot compile the transform itself, whatever the norm (torch 2.11's jacfwd
        # turns its basis offsets into data-dependent ints): ours fails the same way.
        with pytest.raises(type(e)):
            compiled(ours)(x, w, t)
        return
    got = compiled(ours)(x, w, t)
    want = TRANSFORMS[name](torch_ref, x.double(), w.double(), t.double())
    for g, r in _pairs(got, want):
        _close(g, r, torch.float32)
        assert g.abs().max() > 0.1  # a zero tangent is not an answer


def test_a_transform_of_a_compiled_call_runs_as_f_rms_norms_does():
    """grad / jvp / vmap of a torch.compile'd call: Dynamo cannot trace a transform entered from
    eager, runs the frame eagerly and traces the frames it calls; tracing the interpreter's run
    of a kernel failed (KeyError(torch.uint64)). Now it runs, with F.rms_norm's values."""
    x, w, t = _inputs(torch.float32)
    torch._dynamo.reset()
    f = torch.compile(lambda a: ours(a, w))
    got = (
        torch.func.grad(lambda a: (f(a) * t).sum())(x),
        torch.func.jvp(f, (x,), (t,))[1],
        torch.func.vmap(f)(x),
    )
    r = x.double().requires_grad_()
    want = (
        torch.func.grad(lambda a: (torch_ref(a, w.double()) * t.double()).sum())(r.detach()),
        torch.func.jvp(lambda a: torch_ref(a, w.double()), (x.double(),), (t.double(),))[1],
        torch_ref(x.double(), w.double()),
    )
    for g, r in zip(got, want, strict=True):
        _close(g, r, torch.float32)

"""Every input may be a view: weight, x, residual and dy are read with their own strides (or
copied once, counted in ``COPIES``), never as if contiguous.

Each case builds the input as a view of a leaf ``base`` (a step slice, ``expand``'s stride 0, a
matrix column, ``as_strided``, a transpose), runs forward and backward, and checks y and the
gradient that reaches ``base`` (through the view's own backward) against float64 autograd through
the reference on the same view of ``base.double()``.
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close

import rmsnorm_kernel as rk

N = 40
M = 6

#: weight views: ``(base shape, view of base -> (N,))``.
WEIGHT_VIEWS = {
    "step": ((2 * N,), lambda b: b[::2]),
    "expand": ((1,), lambda b: b.expand(N)),
    "column": ((N, 3), lambda b: b[:, 1]),
    "as_strided": ((3 * N,), lambda b: b.as_strided((N,), (3,), 2)),
    "reversed_steps": ((N, 2), lambda b: b.t()[1]),
}
#: x / residual / dy views: ``(base shape, view of base -> (M, N))``.
ROW_VIEWS = {
    "contiguous": ((M, N), lambda b: b),
    "step_last_dim": ((M, 2 * N), lambda b: b[:, ::2]),
    "expand_rows": ((N,), lambda b: b.expand(M, N)),
    "transpose": ((N, M), lambda b: b.t()),
    "overlapping_rows": ((M * 7 + N,), lambda b: b.as_strided((M, N), (7, 1))),
    "row_step": ((2 * M, N + 5), lambda b: b[::2, 3 : 3 + N]),
    # a negative-bit view (torch._neg_view; PyTorch's OpInfo math-bit test): memory holds -values
    "neg_bit": ((M, N), lambda b: torch._neg_view(-b)),
    "neg_bit_transpose": ((N, M), lambda b: torch._neg_view(-b).t()),
}


def _leaf(shape, device, dtype=torch.float32):
    return torch.randn(shape, device=device, dtype=dtype).requires_grad_()


def _reference(x, w, eps, residual=None):
    h = x if residual is None else x + residual
    return rk.rmsnorm_reference(h, w, eps)


@pytest.mark.parametrize("kind", list(WEIGHT_VIEWS))
def test_weight_view_forward_and_gradients(kind, device):
    shape, view = WEIGHT_VIEWS[kind]
    base = _leaf(shape, device)
    w = view(base)
    assert w.shape == (N,) and not w.is_contiguous()
    x = _leaf((M, N), device)
    dy = torch.randn(M, N, device=device)
    copies = dict(rk.COPIES)
    y = rk.rmsnorm(x, w, 1e-6)
    y.backward(dy)
    assert rk.COPIES == copies, "a weight view must be read in place"

    base64 = base.detach().double().requires_grad_()
    x64 = x.detach().double().requires_grad_()
    y64 = _reference(x64, view(base64), 1e-6)
    y64.backward(dy.double())
    assert_close(y, y64, torch.float32, f"y ({kind} weight)")
    assert_close(x.grad, x64.grad, torch.float32, f"dx ({kind} weight)")
    assert_close(base.grad, base64.grad, torch.float32, f"dweight into the base ({kind})")


@pytest.mark.parametrize("kind", list(ROW_VIEWS))
@pytest.mark.parametrize("which", ["x", "residual", "dy"])
def test_row_views_forward_and_gradients(kind, which, device):
    shape, view = ROW_VIEWS[kind]
    w_base = _leaf((N,), device)
    tensors = {
        name: (_leaf(shape, device) if name == which else _leaf((M, N), device))
        for name in ("x", "residual")
    }
    x = view(tensors["x"]) if which == "x" else tensors["x"]
    res = view(tensors["residual"]) if which == "residual" else tensors["residual"]
    dy_base = torch.randn(shape if which == "dy" else (M, N), device=device)
    dy = view(dy_base) if which == "dy" else dy_base
    dh = torch.randn(M, N, device=device)

    y, h = rk.rmsnorm(x, w_base, 1e-6, residual=res)
    torch.autograd.backward([y, h], [dy, dh])

    leaves64 = {k: t.detach().double().requires_grad_() for k, t in tensors.items()}
    w64 = w_base.detach().double().requires_grad_()
    x64 = view(leaves64["x"]) if which == "x" else leaves64["x"]
    r64 = view(leaves64["residual"]) if which == "residual" else leaves64["residual"]
    h64 = x64 + r64
    y64 = rk.rmsnorm_reference(h64, w64, 1e-6)
    torch.autograd.backward([y64, h64], [dy.double(), dh.double()])
    what = f"{which} as a {kind} view"
    assert_close(y, y64, torch.float32, f"y ({what})")
    assert_close(h, h64, torch.float32, f"h ({what})")
    for name in ("x", "residual"):
        assert_close(tensors[name].grad, leaves64[name].grad, torch.float32, f"d{name} ({what})")
    assert_close(w_base.grad, w64.grad, torch.float32, f"dweight ({what})")


@pytest.mark.parametrize("kind", ["step", "expand", "column"])
def test_weight_view_llama_rounding(kind, device):
    """The Llama rounding mode reads weight views with their stride too (fp16: exact on CPU)."""
    shape, view = WEIGHT_VIEWS[kind]
    w = view(torch.randn(shape, device=device, dtype=torch.float16))
    x = torch.randn(M, N, device=device, dtype=torch.float16)
    y = rk.rmsnorm(x, w, 1e-6, rounding="llama")
    expected = rk.rmsnorm(x, w.contiguous(), 1e-6, rounding="llama")
    assert torch.equal(y, expected)


def test_expanded_weight_on_a_wide_row(device):
    """stride 0 over 2**20 columns: read the one value, never 2**20 of them (a segfault before)."""
    n = 1 << 20
    w = torch.tensor([1.5], device=device).expand(n)
    x = torch.randn(1, n, device=device)
    y = rk.rmsnorm(x, w, 1e-6)
    expected = rk.rmsnorm_reference(x.double(), w.double(), 1e-6)
    assert_close(y, expected, torch.float32, "y with an expanded weight, N = 2**20")


def test_weight_offsets_past_int32_are_copied_once(device, monkeypatch):
    """A stride whose offsets overflow int32 is copied once, and counted."""
    from rmsnorm_kernel import ops

    monkeypatch.setattr(ops, "_INT32_MAX", 2 * N)  # the rule, at a size a test can allocate
    base = torch.randn(N, 3, device=device)
    w = base[:, 1]  # stride 3: (N - 1) * 3 > 2N
    x = torch.randn(M, N, device=device)
    before = rk.COPIES["weight"]
    y = rk.rmsnorm(x, w, 1e-6)
    assert rk.COPIES["weight"] == before + 1
    assert_close(y, rk.rmsnorm_reference(x.double(), w.double(), 1e-6), torch.float32, "y")


@pytest.mark.parametrize("rounding", ["torch", "llama"])
def test_a_negative_bit_weight_is_read_as_its_values(rounding, device):
    """torch._neg_view(-w) equals w but its memory holds -w: read as memory, y came out
    negated. Resolved once (counted in COPIES), then y, dx and the weight's gradient are w's."""
    base = _leaf((N,), device)
    w = torch._neg_view(-base)
    assert w.is_neg() and torch.equal(w, base)
    x = _leaf((M, N), device)
    dy = torch.randn(M, N, device=device)
    copies = rk.COPIES["weight"]
    y = rk.rmsnorm(x, w, 1e-6, rounding=rounding)
    y.backward(dy)
    assert rk.COPIES["weight"] == copies + 2  # the forward's launch and the backward's
    x2 = x.detach().clone().requires_grad_()
    base2 = base.detach().clone().requires_grad_()
    y2 = rk.rmsnorm(x2, base2, 1e-6, rounding=rounding)
    y2.backward(dy)
    assert (
        torch.equal(y, y2) and torch.equal(x.grad, x2.grad) and torch.equal(base.grad, base2.grad)
    )


def _cow_run(x, w, res, dy, dh):
    """y, h and every gradient of one fwd+bwd (leaves x, w, res)."""
    y, h = rk.rmsnorm(x, w, 1e-6, residual=res)
    grads = torch.autograd.grad([y, h], [x, w, res], [dy, dh])
    return (y, h, *grads)


@pytest.mark.parametrize("kind", ["contiguous", "step_last_dim", "row_step", "transpose"])
def test_copy_on_write_inputs_stay_lazy(kind, device):
    """Lazily cloned (copy-on-write, ``torch._lazy_clone``) x, weight, residual, dy and dh stay
    lazy through forward and backward, as F.rms_norm leaves them (PyTorch's ``test_cow_input``):
    Triton's launch path took each tensor's mutable data pointer, which copies a COW tensor's
    storage. Values: the same bits as the same views not lazily cloned."""
    shape, view = ROW_VIEWS[kind]
    raw = {name: view(torch.randn(shape, device=device)) for name in ("x", "res", "dy", "dh")}
    raw["w"] = torch.randn(N, device=device)
    leaves = ("x", "w", "res")
    plain = {k: (t.detach().requires_grad_() if k in leaves else t) for k, t in raw.items()}
    cow = {k: torch._lazy_clone(t) for k, t in raw.items()}
    assert all(torch._C._is_cow_tensor(t) for t in cow.values())
    for k in leaves:
        cow[k].requires_grad_()
    got = _cow_run(cow["x"], cow["w"], cow["res"], cow["dy"], cow["dh"])
    lazy = {k: torch._C._is_cow_tensor(t) for k, t in cow.items()}
    assert all(lazy.values()), f"materialised: {[k for k, v in lazy.items() if not v]}"
    expected = _cow_run(plain["x"], plain["w"], plain["res"], plain["dy"], plain["dh"])
    for name, a, b in zip(("y", "h", "dx", "dweight", "dresidual"), got, expected, strict=True):
        assert torch.equal(a, b), name


#: inputs whose rows the launch views or copies to 2-D: ``(base shape, view of base)``.
ROWS_REMADE = {
    "transpose": ((N, M), lambda b: b.t()),
    "row_step_3d": ((2, 2 * M, N), lambda b: b[:, ::2]),
    "step_last_dim_3d": ((2, M, 2 * N), lambda b: b[..., ::2]),
}


@pytest.mark.parametrize("kind", list(ROWS_REMADE))
@pytest.mark.parametrize("entry", ["rmsnorm", "rms_norm", "residual"])
def test_outputs_of_a_remade_input_take_in_place_ops(kind, entry, device):
    """F.rms_norm's output may be modified in place (``y.mul_(2)``, ``relu_``, ``y[0] = 0``)
    whatever x's layout. Ours must be too: y (and h) are allocated in x's shape, not views of
    the 2-D rows made inside the autograd.Function (autograd refuses in-place ops on those).
    (h = x + residual is saved for the backward, as F.rms_norm saves its input: only y is
    modified.)"""
    shape, view = ROWS_REMADE[kind]
    base = _leaf(shape, device)
    w = _leaf((N,), device)
    x = view(base)
    res = torch.randn(x.shape, device=device) if entry == "residual" else None
    if entry == "rms_norm":
        out = (rk.rms_norm(x, (N,), w, 1e-6),)
    else:
        out = rk.rmsnorm(x, w, 1e-6, residual=res)
        out = out if isinstance(out, tuple) else (out,)
    for t in out:
        assert t.shape == x.shape and t._base is None, "an output is a view"
    out[0].mul_(2)
    out[0][0] = 0
    sum(t.sum() for t in out).backward()

    base64 = base.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    h64 = view(base64) if res is None else view(base64) + res.double()
    out64 = [2 * rk.rmsnorm_reference(h64, w64, 1e-6)] + ([h64] if res is not None else [])
    out64[0] = torch.cat([torch.zeros_like(out64[0][:1]), out64[0][1:]])
    sum(t.sum() for t in out64).backward()
    for got, want in zip(out, out64, strict=True):
        assert_close(got, want, torch.float32, f"output ({kind}, {entry})")
    assert_close(base.grad, base64.grad, torch.float32, f"dx into the base ({kind}, {entry})")
    assert_close(w.grad, w64.grad, torch.float32, f"dweight ({kind}, {entry})")


@pytest.mark.parametrize("kind", list(ROWS_REMADE))
def test_forward_ad_through_a_remade_input(kind, device):
    """A forward-AD dual whose primal's rows are remade (a transpose): F.rms_norm takes it, and
    so must we (a tangent cannot be attached to a view made inside the Function)."""
    import torch.autograd.forward_ad as fwad

    shape, view = ROWS_REMADE[kind]
    primal = view(torch.randn(shape, device=device, dtype=torch.float64))
    tangent = torch.randn(primal.shape, device=device, dtype=torch.float64)
    w = torch.randn(N, device=device, dtype=torch.float64)
    with fwad.dual_level():
        y_t = fwad.unpack_dual(rk.rms_norm(fwad.make_dual(primal, tangent), (N,), w, 1e-6)).tangent
    _, want = torch.func.jvp(lambda a: rk.rmsnorm_reference(a, w, 1e-6), (primal,), (tangent,))
    assert_close(y_t, want, torch.float64, f"tangent ({kind})")

"""``rounding="llama"``: Hugging Face's ``LlamaRMSNorm`` inside the kernel.

Forward: ``w * (x * r).to(x.dtype)``, the product in ``promote_types(w.dtype, x.dtype)`` (the
output dtype); one launch. Backward: one launch; dweight sums ``dy`` times the rounded normalised
value, dx treats that rounding as the identity (as autograd through ``.to`` does). Checked against
HF's formula run by PyTorch (forward; the same rule as tests/integrations' module checks) and
against the float64 oracle of HF's formula (gradients, with the campaign's tolerances).

bfloat16 runs on CPU too: the package makes Triton's interpreter round float32 -> bfloat16 to
nearest even, as compiled kernels and PyTorch do
(``backend._bfloat16_to_nearest_in_the_interpreter``).
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, loosest

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, ops

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
#: The share of outputs that must be bitwise equal to PyTorch's: the kernel's float32 r may differ
#: from torch.rsqrt by an ulp, which flips a rare rounding (tests/integrations uses the same rule).
MIN_EXACT = 0.99

CASES = [  # (x dtype, weight dtype)
    (F16, F16),
    (F16, F32),
    (F32, F16),
    (F32, F32),
    (F64, F64),
    (F64, F32),
    (BF16, BF16),
    (BF16, F32),
    (F32, BF16),
]


def hf_llama(x, w, eps):
    """transformers' LlamaRMSNorm.forward, with the math dtype of the kernel (float64 for float64
    x, which the HF module itself would compute in float32)."""
    h = x.to(F64 if x.dtype == F64 else F32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def oracle_llama(x, w, dy, eps, residual=None, dh=None):
    """float64 autograd through HF's formula; the rounding of x * r is a straight-through step
    (its value is the rounded one, its gradient the identity). ``(y, dx, dw, dres)``."""
    xd = x.detach().double().requires_grad_()
    wd = w.detach().double().requires_grad_()
    rd = None if residual is None else residual.detach().double().requires_grad_()
    h = xd
    if rd is not None:
        h = xd + rd
        h = h + (h.detach().to(x.dtype).double() - h.detach())
    n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    n = n + (n.detach().to(x.dtype).double() - n.detach())
    y = wd * n
    if dh is None:
        y.backward(dy.double())
    else:
        torch.autograd.backward([y, h], [dy.double(), dh.double()])
    return y.detach(), xd.grad, wd.grad, None if rd is None else rd.grad


def assert_rule(x, w, eps, residual=None):
    """The kernel's output is HF's formula bitwise, given the kernel's own r (the rule: where
    each rounding happens); and, with torch's rsqrt instead, at least 99% bitwise (r itself is
    held to the oracle by the campaign and the gradient tests)."""
    y, h, rstd = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, w, residual, eps, 0.0, True)
    src = x if residual is None else h
    math = F64 if x.dtype == F64 else F32
    given_r = w * (src.to(math) * rstd.view(*src.shape[:-1], 1)).to(x.dtype)
    assert y.dtype == given_r.dtype == torch.promote_types(w.dtype, x.dtype)
    mismatch = (y != given_r).sum().item()
    assert mismatch == 0, f"{mismatch} outputs differ from HF's rule with the kernel's r"
    hf = hf_llama(src, w, eps)
    if x.dtype in (F16, BF16):  # x * r rounded to 16 bits hides most of r's last-ulp differences
        exact = (y == hf).float().mean().item()
        assert exact >= MIN_EXACT, f"only {exact:.4f} of the outputs equal HF's bitwise"
    else:  # float32 (float64) math rounded once: within two ulps (the integration tests' rule)
        tol = {F32: {"atol": 1e-6, "rtol": 2**-22}, F64: {"atol": 1e-12, "rtol": 1e-10}}
        torch.testing.assert_close(y, hf, **tol[x.dtype])
    return y


@pytest.mark.parametrize("x_dtype, w_dtype", CASES, ids=str)
@pytest.mark.parametrize("n", [64, 1500])  # the several-rows kernel and the one-row kernel
def test_forward_is_hf_llama(x_dtype, w_dtype, n, device):
    x = (torch.randn(256, n, device=device) * 3).to(x_dtype)
    w = torch.randn(n, device=device).to(w_dtype)
    y = assert_rule(x, w, 1e-6)
    assert torch.equal(rk.rmsnorm(x, w, 1e-6, rounding="llama"), y)


def test_wide_rows_chunked_forward(device):
    """Rows wider than the one-pass block take the chunked path, with the same rule."""
    n = config.MAX_FUSED_N + 100
    x = torch.randn(2, n, device=device, dtype=F16)
    w = torch.randn(n, device=device, dtype=F16)
    assert_rule(x, w, 1e-6)


@pytest.mark.parametrize("x_dtype, w_dtype", CASES, ids=str)
@pytest.mark.parametrize("n", [257, config.MAX_FUSED_N_BWD + 64])  # one tile; column tiles
def test_gradients_match_the_oracle_of_hf_formula(x_dtype, w_dtype, n, device):
    m = 9 if n < 4096 else 3
    x = torch.randn(m, n, device=device, dtype=x_dtype, requires_grad=True)
    w = torch.randn(n, device=device, dtype=w_dtype, requires_grad=True)
    y = rk.rmsnorm(x, w, 1e-6, rounding="llama")
    dy = torch.randn_like(y)
    y.backward(dy)
    _, dx_ref, dw_ref, _ = oracle_llama(x, w, dy, 1e-6)
    assert x.grad.dtype == x_dtype and w.grad.dtype == w_dtype
    tol = loosest(x_dtype, w_dtype)
    assert_close(x.grad, dx_ref, tol, "dx")
    assert_close(w.grad, dw_ref, tol, "dweight")


def test_dweight_uses_the_rounded_value(device):
    """dweight = sum(dy * round(x * r)): the unrounded sum misses the oracle at fp16 tolerance
    on inputs chosen so that the rounding moves every term the same way."""
    torch.manual_seed(1)
    m, n = 512, 64
    x = torch.randn(m, n, device=device, dtype=F16, requires_grad=True)
    w = torch.ones(n, device=device, dtype=F32, requires_grad=True)
    y = rk.rmsnorm(x, w, 1e-6, rounding="llama")
    n_rounded = hf_llama(x.detach(), torch.ones(n, device=device, dtype=F32), 1e-6).double()
    dy = torch.sign(n_rounded - hf_llama(x.detach().double(), w.detach().double(), 1e-6))
    y.backward(dy.to(y.dtype))
    expected = (dy.double() * n_rounded).sum(0)
    torch.testing.assert_close(w.grad.double(), expected, atol=1e-4, rtol=1e-6)


@pytest.mark.parametrize("dtype", [F16, F32])
def test_residual(dtype, device):
    x = torch.randn(4, 3, 200, device=device, dtype=dtype, requires_grad=True)
    r = torch.randn(4, 3, 200, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(200, device=device, dtype=F32, requires_grad=True)
    y, h = rk.rmsnorm(x, w, 1e-6, residual=r, rounding="llama")
    assert y.dtype == F32 and h.dtype == dtype
    assert torch.equal(h, x.detach() + r.detach())
    assert torch.equal(y, assert_rule(x.detach(), w.detach(), 1e-6, residual=r.detach()))
    dy, dh = torch.randn_like(y), torch.randn_like(h)
    torch.autograd.backward([y, h], [dy, dh])
    _, dx_ref, dw_ref, dres_ref = oracle_llama(x, w, dy, 1e-6, residual=r, dh=dh)
    assert_close(x.grad, dx_ref, dtype, "dx")
    assert_close(r.grad, dres_ref, dtype, "dresidual")
    assert_close(w.grad, dw_ref, F32 if dtype == F32 else dtype, "dweight")


def test_one_launch_each_way(device, monkeypatch):
    """Forward: one kernel launch (no PyTorch multiply); backward: the backward kernel once,
    then the dweight sum where the heuristic does not finish dweight in the launch; on a GPU at
    small M, the column-strip backward alone."""
    launches = []
    real = ops.CachedKernel.launch

    def counting(self, *args, **kwargs):
        launches.append(self.fn.__name__)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ops.CachedKernel, "launch", counting)
    x = torch.randn(8, 256, device=device, dtype=F16, requires_grad=True)
    w = torch.randn(256, device=device, dtype=F16, requires_grad=True)
    y = rk.rmsnorm(x, w, 1e-6, rounding="llama")
    rows = config.forward_config(8, 256, ops._device_index(x)).rows
    assert launches == ["rmsnorm_forward_rows_kernel" if rows else "rmsnorm_forward_kernel"]
    assert y.grad_fn is not None and "RMSNorm" in type(y.grad_fn).__name__
    y.sum().backward()
    bwd = config.backward_config(8, 256, ops._device_index(x))
    if bwd.dw_columns:  # a GPU's small M: dx and dweight by one launch (COLUMNS_MAX_ELEMS)
        assert launches[1:] == ["rmsnorm_backward_columns_kernel"]
    else:
        finish = [] if bwd.tree else ["dweight_sum_kernel"]
        assert launches[1:] == ["rmsnorm_backward_kernel", *finish]


def test_saves_only_x_weight_and_rstd(device):
    """What the backward keeps alive: x, the weight and one float per row, nothing of x's size
    more (the normalised value is recomputed, not saved)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    m, n = 32, 512
    x = torch.randn(m, n, device=device, dtype=F16, requires_grad=True)
    w = torch.randn(n, device=device, dtype=F32, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = rk.rmsnorm(x, w, 1e-6, rounding="llama")
    assert sum(storages.values()) == m * n * 2 + n * 4 + m * 4
    y.sum().backward()


def test_contract(device):
    x = torch.randn(2, 8, device=device)
    with pytest.raises(ValueError, match=r"rounding must be one of \('torch', 'llama'\)"):
        rk.rmsnorm(x, torch.randn(8, device=device), 1e-6, rounding="gemma")
    with pytest.raises(TypeError, match="float64 weight needs float64 x"):
        rk.rmsnorm(x, torch.randn(8, device=device, dtype=F64), 1e-6, rounding="llama")
    # Without a weight the rule is the default one: x * r rounded once to x's dtype.
    xs = torch.randn(3, 40, device=device, dtype=F16)
    assert torch.equal(rk.rmsnorm(xs, None, 1e-6, rounding="llama"), rk.rmsnorm(xs, None, 1e-6))


def test_compiled_fullgraph(device):
    torch._dynamo.reset()
    x = torch.randn(4, 96, device=device, dtype=F16, requires_grad=True)
    w = torch.randn(96, device=device, dtype=F32, requires_grad=True)
    fn = torch.compile(lambda x, w: rk.rmsnorm(x, w, 1e-6, rounding="llama"), fullgraph=True)
    y = fn(x, w)
    assert y.dtype == F32
    assert torch.equal(y, rk.rmsnorm(x, w, 1e-6, rounding="llama"))
    y.sum().backward()
    _, dx_ref, dw_ref, _ = oracle_llama(x, w, torch.ones_like(y), 1e-6)
    assert_close(x.grad, dx_ref, F16, "dx")
    assert_close(w.grad, dw_ref, F16, "dweight")

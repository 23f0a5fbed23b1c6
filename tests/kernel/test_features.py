"""The extended contract: leading dims, row strides without copies, M = 0, long rows, no weight,
offset, fused residual, mixed weight dtype, fp64 gradcheck, double backward (more in
test_double_backward.py)."""

from __future__ import annotations

import warnings

import pytest
import torch
from kernel_helpers import assert_close, check_against_oracle, loosest, oracle, oracle_y

import rmsnorm_kernel as rk


def test_leading_dims(device):
    x, _, y = check_against_oracle(
        torch.randn(2, 3, 5, 40, device=device), torch.randn(40, device=device), torch.float32
    )
    assert y.shape == x.shape and x.grad.shape == x.shape


def test_1d_input(device):
    x = torch.randn(33, device=device)
    y = rk.rmsnorm(x, None, 1e-6)
    assert y.shape == (33,)
    assert_close(y, oracle_y(x, None), torch.float32, "y")


def test_row_strided_view_is_read_in_place(device):
    base = torch.randn(9, 100, device=device)
    x = base[::2, 10:70]  # row stride 200, unit column stride
    assert not x.is_contiguous()
    w = torch.randn(60, device=device, requires_grad=True)
    copies = dict(rk.COPIES)
    y = rk.rmsnorm(x, w, 1e-6)
    assert rk.COPIES == copies, "a row-strided view must not be copied"
    assert_close(y, oracle_y(x, w), torch.float32, "y")


def test_row_strided_view_gradients_without_copy(device):
    base = torch.randn(6, 64, device=device, requires_grad=True)
    x = base[:, :48]
    w = torch.randn(48, device=device, requires_grad=True)
    dy = torch.randn(6, 48, device=device)
    copies = dict(rk.COPIES)
    rk.rmsnorm(x, w, 1e-6).backward(dy)
    assert rk.COPIES == copies
    _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    assert_close(base.grad[:, :48], dx_ref, torch.float32, "dx")
    assert (base.grad[:, 48:] == 0).all()
    assert_close(w.grad, dw_ref, torch.float32, "dweight")


def test_kernel_reads_the_view_itself(device, monkeypatch):
    """No copy: the pointer handed to the kernel is the view's own storage."""
    from rmsnorm_kernel import ops

    seen = {}
    real = ops.launch_forward

    def spy(x2, *args, **kwargs):
        seen["ptr"] = x2.data_ptr()
        return real(x2, *args, **kwargs)

    monkeypatch.setattr(ops, "launch_forward", spy)
    base = torch.randn(8, 50, device=device)
    x = base[1::3, 5:45]
    rk.rmsnorm(x, None, 1e-6)
    assert seen["ptr"] == x.data_ptr()


def test_non_contiguous_last_dim_is_copied_explicitly(device):
    x = torch.randn(40, 6, device=device).t()  # (6, 40), column stride 6
    w = torch.randn(40, device=device)
    before = rk.COPIES["x"]
    y = rk.rmsnorm(x, w, 1e-6)
    assert rk.COPIES["x"] == before + 1
    assert_close(y, oracle_y(x, w), torch.float32, "y")


def test_expanded_upstream_gradient(device):
    x = torch.randn(5, 30, device=device, requires_grad=True)
    w = torch.randn(30, device=device, requires_grad=True)
    rk.rmsnorm(x, w, 1e-6).sum().backward()  # dy is an expanded tensor of ones
    _, _, dx_ref, dw_ref, _ = oracle(x, w, torch.ones(5, 30, device=device))
    assert_close(x.grad, dx_ref, torch.float32, "dx")
    assert_close(w.grad, dw_ref, torch.float32, "dweight")


def test_empty_rows(device):
    x = torch.randn(0, 16, device=device, requires_grad=True)
    w = torch.randn(16, device=device, requires_grad=True)
    y = rk.rmsnorm(x, w, 1e-6)
    assert y.shape == (0, 16)
    y.sum().backward()
    assert x.grad.shape == (0, 16)
    assert torch.equal(w.grad, torch.zeros(16, device=device))


@pytest.mark.parametrize("m,n", [(3, 65536), (3, 70000), (2, 262144)])
def test_wide_rows(m, n, device):
    """Rows past the forward's one-pass width (config.MAX_FUSED_N) are read in chunks: 65536 in
    whole chunks, 70000 with a ragged last chunk, 262144 in many; the backward splits every row
    above 16384 columns into column tiles."""
    x = torch.randn(m, n, device=device)
    w = torch.randn(n, device=device)
    check_against_oracle(x, w, torch.float32)


@pytest.mark.parametrize("n", [100, 70000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_no_weight(n, dtype, device):
    check_against_oracle(torch.randn(4, n, device=device, dtype=dtype), None, dtype)


@pytest.mark.parametrize("n", [96, 70000])
def test_gemma_offset(n, device):
    x = torch.randn(5, n, device=device)
    w = 0.1 * torch.randn(n, device=device)
    check_against_oracle(x, w, torch.float32, offset=1.0)


@pytest.mark.parametrize("n", [257, 70000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("use_h", [True, False])
def test_fused_residual(n, dtype, use_h, device):
    x = torch.randn(3, 2, n, device=device, dtype=dtype, requires_grad=True)
    r = torch.randn(3, 2, n, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(n, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(3, 2, n, device=device, dtype=dtype)
    dh = torch.randn(3, 2, n, device=device, dtype=dtype)
    y, h = rk.rmsnorm(x, w, 1e-6, residual=r)
    assert torch.equal(h, x.detach() + r.detach())
    if use_h:
        torch.autograd.backward([y, h], [dy, dh])
    else:
        y.backward(dy)
    y_ref, _, dx_ref, dw_ref, dres_ref = oracle(x, w, dy, residual=r, dh=dh if use_h else None)
    assert_close(y, y_ref, dtype, "y")
    assert_close(x.grad, dx_ref, dtype, "dx")
    assert_close(r.grad, dres_ref, dtype, "dresidual")
    assert_close(w.grad, dw_ref, dtype, "dweight")


@pytest.mark.parametrize(
    "x_dtype,w_dtype",
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.bfloat16),
    ],
    ids=str,
)
def test_weight_dtype_differs(x_dtype, w_dtype, device):
    """Output dtype follows torch.nn.functional.rms_norm: x.dtype, whatever the weight's."""
    x = torch.randn(6, 130, device=device, dtype=x_dtype, requires_grad=True)
    w = torch.randn(130, device=device, dtype=w_dtype, requires_grad=True)
    y = rk.rmsnorm(x, w, 1e-6)
    assert y.dtype == x_dtype
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Mismatch dtype ... Cannot dispatch to fused"
        torch_out = torch.nn.functional.rms_norm(x.detach().cpu(), (130,), w.detach().cpu())
    assert y.dtype == torch_out.dtype
    dy = torch.randn_like(y)
    y.backward(dy)
    assert x.grad.dtype == x_dtype and w.grad.dtype == w_dtype
    y_ref, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
    tol = loosest(x_dtype, w_dtype)
    assert_close(y, y_ref, tol, "y")
    assert_close(x.grad, dx_ref, tol, "dx")
    assert_close(w.grad, dw_ref, tol, "dweight")


def test_bf16_no_worse_than_pytorch_bf16(device):
    """Kernel bf16 error vs the float64 oracle is no worse than PyTorch's own bf16 paths.

    On CPU too: the package makes Triton's interpreter round float32 -> bfloat16 to nearest even
    (it truncated, which doubled the rounding error there), as compiled kernels do.
    """
    x = torch.randn(64, 1000, device=device, dtype=torch.bfloat16)
    w = torch.randn(1000, device=device, dtype=torch.bfloat16)
    exact = oracle_y(x, w)
    ours = (rk.rmsnorm(x, w, 1e-6).double() - exact).abs()
    for name, theirs in {
        "rmsnorm_reference(bf16)": rk.rmsnorm_reference(x, w, 1e-6),
        "F.rms_norm(bf16)": torch.nn.functional.rms_norm(x, (1000,), w, 1e-6),
    }.items():
        err = (theirs.double() - exact).abs()
        assert ours.max() <= err.max(), name
        assert ours.mean() <= 1.01 * err.mean(), name


@pytest.mark.parametrize("n", [7, 70000])
def test_gradcheck_on_triton_fp64(n, device):
    m = 3 if n < 1000 else 1
    x = torch.randn(m, n, device=device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(n, device=device, dtype=torch.float64, requires_grad=True)
    fast = n >= 1000  # fast mode checks a random projection: full Jacobians of 70000 are too big
    assert torch.autograd.gradcheck(lambda a, b: rk.rmsnorm(a, b, 1e-6), (x, w), fast_mode=fast)


def test_gradcheck_residual_offset_fp64(device):
    x = torch.randn(2, 9, device=device, dtype=torch.float64, requires_grad=True)
    r = torch.randn(2, 9, device=device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(9, device=device, dtype=torch.float64, requires_grad=True)
    fn = lambda a, b, c: rk.rmsnorm(a, c, 1e-6, offset=1.0, residual=b)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, r, w))


def test_double_backward_matches_the_reference(device):
    """Differentiating the gradient gives the float64 reference's second derivatives (issue 15,
    item 10: it used to raise, and to give no gradient with allow_unused)."""
    x = torch.randn(3, 8, device=device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, device=device, dtype=torch.float64, requires_grad=True)
    grads = []
    for fn in (rk.rmsnorm, rk.rmsnorm_reference):
        (gx,) = torch.autograd.grad(fn(x, w, 1e-6).pow(2).sum(), x, create_graph=True)
        grads.append(torch.autograd.grad(gx.sin().sum(), (x, w)))
    for got, want, name in zip(*grads, ("dx", "dweight"), strict=True):
        assert_close(got, want, torch.float64, name)

"""Under autocast, the drop-ins ``rms_norm`` / ``RMSNorm`` follow ``F.rms_norm`` /
``nn.RMSNorm``: where torch registers an autocast kernel for ``aten::rms_norm`` (CUDA: the float32
list), 16-bit inputs are cast to float32 first and the output is float32; where it does not (CPU),
nothing changes. ``rmsnorm`` itself never casts: the Hugging Face integration builds modules that
autocast does not touch out of it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_helpers import assert_close

import rmsnorm_kernel as rk
from rmsnorm_kernel import module

DEVICE = "cuda" if rk.BACKEND == "cuda" else "cpu"
N = 96


def _inputs(x_dtype, w_dtype, device=DEVICE):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, N, generator=gen).to(device, x_dtype).requires_grad_()
    w = (1 + 0.3 * torch.randn(N, generator=gen)).to(device, w_dtype).requires_grad_()
    return x, w


def test_the_rule_is_read_from_torch():
    """The table mirrors torch's own registrations (no autocast kernel for rms_norm on CPU)."""
    for device_type, cast in module.AUTOCAST_FLOAT32.items():
        key = "Autocast" + device_type.upper()
        assert cast == torch._C._dispatch_has_kernel_for_dispatch_key("aten::rms_norm", key)


@pytest.mark.skipif(rk.BACKEND == "cuda", reason="CPU tensors run only through the interpreter")
def test_cpu_autocast_keeps_the_input_dtype_as_f_rms_norm_does():
    x, w = _inputs(torch.bfloat16, torch.float32, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, torch_out = rk.rms_norm(x, (N,), w, 1e-6), F.rms_norm(x, (N,), w, 1e-6)
    assert ours.dtype == torch_out.dtype == torch.bfloat16


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16])
def test_a_registered_rule_casts_16_bit_inputs_to_float32(monkeypatch, x_dtype):
    """The cast path itself, on any device: pretend torch registered the rule for it."""
    monkeypatch.setitem(module.AUTOCAST_FLOAT32, DEVICE, True)
    x, w = _inputs(x_dtype, x_dtype)
    dy = torch.randn(5, N, device=DEVICE)
    with torch.autocast(DEVICE, dtype=x_dtype):
        y = rk.rms_norm(x, (N,), w, 1e-6)
        module_y = rk.RMSNorm(N, eps=1e-6).to(DEVICE, x_dtype)(x)
        kernel_y = rk.rmsnorm(x, w, 1e-6)
        llama = rk.rmsnorm(x, w, 1e-6, rounding="llama")
    assert y.dtype == module_y.dtype == torch.float32
    assert kernel_y.dtype == llama.dtype == x_dtype  # rmsnorm never casts
    want = F.rms_norm(x.detach().float(), (N,), w.detach().float(), 1e-6)
    assert_close(y, want.double(), torch.float32, "y")
    y.backward(dy)
    assert x.grad.dtype == x_dtype and w.grad.dtype == x_dtype  # through the casts
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    F.rms_norm(xf, (N,), wf, 1e-6).backward(dy)
    assert_close(x.grad, xf.grad.double(), x_dtype, "dx")
    assert_close(w.grad, wf.grad.double(), x_dtype, "dweight")


@pytest.mark.gpu
@pytest.mark.parametrize("autocast_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "x_dtype,w_dtype",
    [
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float32),
        (torch.float32, torch.float32),
    ],
    ids=str,
)
def test_cuda_autocast_matches_f_rms_norm_gpu(autocast_dtype, x_dtype, w_dtype):
    """Against torch's own autocast on CUDA: output dtype and values, module and function."""
    x, w = _inputs(x_dtype, w_dtype, "cuda")
    with torch.autocast("cuda", dtype=autocast_dtype):
        ours = rk.rms_norm(x, (N,), w, 1e-6)
        want = F.rms_norm(x, (N,), w, 1e-6)
        module = rk.RMSNorm(N, eps=1e-6).cuda()(x)
        torch_module = torch.nn.RMSNorm(N, eps=1e-6).cuda()(x)
    assert ours.dtype == want.dtype
    assert module.dtype == torch_module.dtype
    assert_close(ours, want.double(), ours.dtype, "y")

"""GPU only: sizes the interpreter cannot afford, int64 offsets, CUDA graphs, determinism."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, check_against_oracle, oracle

import rmsnorm_kernel as rk

pytestmark = pytest.mark.gpu

WIDE = [8192, 12288, 16384, 32768, 65536, 65537, 131072, 262144]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", WIDE)
def test_wide_rows_gpu(n, dtype):
    x = torch.randn(64, n, device="cuda", dtype=dtype)
    w = (1 + 0.3 * torch.randn(n, device="cuda")).to(dtype)
    check_against_oracle(x, w, dtype)


@pytest.mark.parametrize("m,n", [(65536, 4096), (4097, 4096), (100_000, 128)])
def test_many_rows_no_scratch_cap(m, n):
    """The seed capped M*N*4 bytes of scratch at 64 MiB; the persistent grid has no M cap.

    A float32 sum of M terms cannot meet an elementwise 1e-5 tolerance (the result's own ulp is
    larger), so the check is the classical bound for any float32 summation order:
    |error| <= M * 2**-24 * sum(|terms|). A mean instead of a sum, or a lost partial, breaks it.
    """
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.float32, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    rk.rmsnorm(x, w, 1e-6).backward(dy)
    xd = x.double()
    terms = dy.double() * xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + 1e-6)
    error = (w.grad.double() - terms.sum(0)).abs()
    bound = m * 2.0**-24 * terms.abs().sum(0)
    assert (error <= bound).all(), f"max error/bound {(error / bound).max().item():.3g}"


def test_dweight_bitwise_deterministic_at_scale():
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    grads = []
    for _ in range(3):
        w.grad = None
        rk.rmsnorm(x, w, 1e-6).backward(dy)
        grads.append(w.grad.clone())
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[1], grads[2])


def test_int64_offsets_over_2_31_elements():
    n = 65536
    m = (2**31) // n + 3  # 2**31 + 3 * 65536 elements
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16) + 0.5
    y = rk.rmsnorm(x, w, 1e-6)
    tail = slice(m - 4, m)  # rows whose offsets exceed 2**31
    assert_close(
        y[tail], rk.rmsnorm_reference(x[tail].double(), w.double(), 1e-6), torch.bfloat16, "y"
    )
    del y
    xg = x.requires_grad_()
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    rk.rmsnorm(xg, w, 1e-6).backward(dy)
    _, _, dx_ref, _, _ = oracle(x[tail], w, dy[tail])
    assert_close(xg.grad[tail], dx_ref, torch.bfloat16, "dx")


def test_row_stride_view_over_2_31_elements():
    base = torch.randn(40000, 2 * 32768, device="cuda", dtype=torch.bfloat16)  # 2.6e9 elements
    x = base[:, 32768:]  # row stride 65536, the read reaches past 2**31
    y = rk.rmsnorm(x, None, 1e-6)
    tail = slice(39996, 40000)
    assert_close(y[tail], rk.rmsnorm_reference(x[tail].double(), None, 1e-6), torch.bfloat16, "y")


def test_cuda_graph_capture_forward_backward():
    norm = rk.RMSNorm(1024, device="cuda")
    x = torch.randn(256, 1024, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(norm, (x,))
    for _ in range(3):
        data = torch.randn(256, 1024, device="cuda")
        xi = data.clone().requires_grad_()
        norm.weight.grad = None
        y = graphed(xi)
        dy = torch.randn_like(y)
        y.backward(dy)
        y_ref, _, dx_ref, dw_ref, _ = oracle(data, norm.weight, dy)
        assert_close(y, y_ref, torch.float32, "y")
        assert_close(xi.grad, dx_ref, torch.float32, "dx")
        assert_close(norm.weight.grad, dw_ref, torch.float32, "dweight")


def test_cuda_graph_capture_raw_forward():
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        rk.rmsnorm(x, w, 1e-6)  # warm up: compile outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = rk.rmsnorm(x, w, 1e-6)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(y, rk.rmsnorm_reference(x.double(), w.double(), 1e-6), torch.bfloat16, "y")

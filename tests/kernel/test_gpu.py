"""GPU only: sizes the interpreter cannot afford, int64 offsets, CUDA graphs, determinism."""

from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import (
    assert_close,
    assert_dweight_within_sum_bound,
    check_against_oracle,
    oracle,
    oracle_y,
)

import rmsnorm_kernel as rk

pytestmark = pytest.mark.gpu

WIDE = [8192, 12288, 16384, 32768, 65536, 65537, 131072, 262144]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", WIDE)
def test_wide_rows_gpu(n, dtype):
    x = torch.randn(64, n, device="cuda", dtype=dtype)
    w = (1 + 0.3 * torch.randn(n, device="cuda")).to(dtype)
    check_against_oracle(x, w, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("m,n", [(600, 8192), (300, 16384), (400, 12000)])
def test_wide_rows_float32_dweight_rows_gpu(m, n, dtype):
    """Past F64_ROWS_MAX_ELEMS the backward takes BWD_WARPS (4 warps at 8192, 8 at 16384): y and
    dx against the oracle (dweight, a float32 sum over the rows: test_many_rows_no_scratch_cap)."""
    from rmsnorm_kernel.config import F64_ROWS_MAX_ELEMS, backward_config

    assert m * n > F64_ROWS_MAX_ELEMS
    assert not backward_config(m, n, torch.cuda.current_device()).dw_float64
    x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
    w = (1 + 0.3 * torch.randn(n, device="cuda")).to(dtype).requires_grad_()
    y = rk.rmsnorm(x, w, 1e-6)
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref, _, dx_ref, _, _ = oracle(x, w, dy, 1e-6)
    assert_close(y, y_ref, dtype, "y")
    assert_close(x.grad, dx_ref, dtype, "dx")


@pytest.mark.parametrize(
    "m,n",
    [(65536, 4096), (4097, 4096), (4097, 8192), (1000, 16384), (100_000, 128), (262_147, 256)],
)
def test_many_rows_no_scratch_cap(m, n):
    """The tutorial capped M*N*4 bytes of scratch at 64 MiB; the persistent grid has no M cap.
    dweight: a float32 sum of M terms (kernel_helpers.assert_dweight_within_sum_bound)."""
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.float32, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    rk.rmsnorm(x, w, 1e-6).backward(dy)
    assert_dweight_within_sum_bound(w.grad, x, dy)


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


# 256: the several-rows backward (rows > 1); 32768: the cluster backward (BWD_CLUSTER_LAUNCH)
@pytest.mark.parametrize("n", [65536, 32768, 256])
def test_int64_offsets_over_2_31_elements(n):
    m = (2**31) // n + 3  # 3 rows past 2**31 elements
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16) + 0.5
    y = rk.rmsnorm(x, w, 1e-6)
    tail = slice(m - 4, m)  # rows whose offsets exceed 2**31
    assert_close(y[tail], oracle_y(x[tail], w), torch.bfloat16, "y")
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
    assert_close(y[tail], oracle_y(x[tail], None), torch.bfloat16, "y")


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
    assert_close(y, oracle_y(x, w), torch.bfloat16, "y")


def test_cached_launches_run_and_stay_correct():
    """After the first launch of a specialisation, launches skip JITFunction.run (launch.py); a
    misaligned view is another specialisation (compiled path first), and both stay correct."""
    from rmsnorm_kernel import ops

    kernels = (ops.FORWARD, ops.FORWARD_ROWS, ops.BACKWARD, ops.BACKWARD_ROWS)
    kernels += (ops.BACKWARD_COLUMNS,)
    before = [dict(k.launches) for k in kernels]
    # 64 rows: the column strips; 3000 x 2048: the one-row backward; 4000 x 256: several rows
    # (under TMA_MIN_M: from 4096 rows a Hopper GPU takes the descriptor kernel at 256 columns).
    for m, n in ((64, 257), (64, 4096), (3000, 2048), (4000, 256)):
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            check_against_oracle(
                torch.randn(m, n, device="cuda", dtype=torch.bfloat16), w, torch.bfloat16
            )
        base = torch.randn(m, n + 1, device="cuda", dtype=torch.bfloat16)
        check_against_oracle(base[:, 1:], w, torch.bfloat16)  # data_ptr not 16-byte aligned
    for kernel, old in zip(kernels, before, strict=True):
        assert kernel.launches["cached"] >= old["cached"] + 2, kernel.fn


def test_a_new_row_count_of_the_same_class_takes_the_cached_handle():
    """Variable-length batches: row counts of one Triton class (all multiples of 16 here) reuse
    the handle compiled for the first one, through one explicit config, and stay correct."""
    from rmsnorm_kernel import ops
    from rmsnorm_kernel.config import ForwardConfig

    config = ForwardConfig(block=512, rows=4, num_warps=4)
    w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    compiled = None
    for m in (4096, 4112, 4128, 4144):
        x = torch.randn(m, 512, device="cuda", dtype=torch.bfloat16)
        y, _, _ = ops.launch_forward(x, w, None, 1e-6, 0.0, x.dtype, config=config)
        assert_close(y, oracle_y(x, w), torch.bfloat16, "y")
        if compiled is None:
            compiled = ops.FORWARD_ROWS.launches["compiled"]
    assert ops.FORWARD_ROWS.launches["compiled"] == compiled


@pytest.mark.parametrize(
    "m,n",
    [(1, 4096), (7, 1000), (4097, 257), (100_000, 128), (3000, 8192), (600, 32768), (50, 65537)],
)
def test_dweight_tree_bitwise_repeatable_and_bounded(m, n):
    """Both dweight finishes (the in-launch tree up to config.TREE_ALWAYS_N columns: 4097 x 257,
    100000 x 128 here; the column strips at small M, 1 x 4096 and 7 x 1000; the sum launch for
    the rest): same
    bits on every run, and within the error bound of the exact sum (a lost or doubled partial, or
    a race, breaks one or the other).

    Bound, u = 2**-24: each term dy*x*r carries r's float32 error (the pairwise sum of squares,
    <= log2(N) u, halved by the square root, plus ~4 u for sqrt and division); the float64 sum
    adds nothing visible; the final rounding to float32 adds u |sum|."""
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.float32, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    grads = []
    for _ in range(5):
        w.grad = None
        rk.rmsnorm(x, w, 1e-6).backward(dy)
        grads.append(w.grad.clone())
    assert all(torch.equal(grads[0], g) for g in grads[1:])
    xd = x.double()
    terms = dy.double() * xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + 1e-6)
    error = (grads[0].double() - terms.sum(0)).abs()
    u = 2.0**-24
    bound = (math.log2(n) / 2 + 4) * u * terms.abs().sum(0) + u * terms.sum(0).abs()
    assert (error <= bound).all(), f"max error/bound {(error / bound).max().item():.3g}"


def test_backward_on_two_streams_at_once():
    """Tree counters are per stream: concurrent backward launches on two streams stay exact
    (1024 columns <= config.TREE_ALWAYS_N: the in-launch tree)."""
    from rmsnorm_kernel import config

    assert config.backward_config(4096, 1024, 0).tree, "this test is about the in-launch tree"
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    cases = []
    for _ in streams:
        x = torch.randn(4096, 1024, device="cuda", requires_grad=True)
        w = torch.randn(1024, device="cuda", requires_grad=True)
        cases.append((x, w, torch.randn(4096, 1024, device="cuda")))
    torch.cuda.synchronize()
    for _ in range(3):
        for s, (x, w, dy) in zip(streams, cases, strict=True):
            x.grad = w.grad = None
            with torch.cuda.stream(s):
                rk.rmsnorm(x, w, 1e-6).backward(dy)
        torch.cuda.synchronize()
        for x, w, dy in cases:
            _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
            assert_close(x.grad, dx_ref, torch.float32, "dx")
            assert_close(w.grad, dw_ref, torch.float32, "dweight")


def test_graph_replays_backward_between_eager_calls():
    """A captured forward+backward replays correctly, with eager calls (same shapes) between."""
    x = torch.randn(512, 2048, device="cuda")
    w = torch.randn(2048, device="cuda")
    dy = torch.randn(512, 2048, device="cuda")

    def step(x, w, dy):
        xl, wl = x.detach().requires_grad_(), w.detach().requires_grad_()
        return torch.autograd.grad(rk.rmsnorm(xl, wl, 1e-6), (xl, wl), dy)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(x, w, dy)  # compile outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dx, dw = step(x, w, dy)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        dy.copy_(torch.randn_like(dy))
        graph.replay()
        eager_dx, eager_dw = step(x, w, dy)
        torch.cuda.synchronize()
        _, _, dx_ref, dw_ref, _ = oracle(x, w, dy)
        assert_close(dx, dx_ref, torch.float32, "dx (graph)")
        assert_close(dw, dw_ref, torch.float32, "dweight (graph)")
        assert torch.equal(dw, eager_dw) and torch.equal(dx, eager_dx)


@pytest.mark.parametrize("m", [1, 17, 128])
@pytest.mark.parametrize("n", [256, 257, 1000, 4096])
@pytest.mark.parametrize("inputs", ["unit", "random"])
def test_fp32_dweight_error_no_worse_than_pytorch(m, n, inputs):
    """float32 dweight: max error vs the float64 oracle <= F.rms_norm's own (campaign shapes)."""
    x = torch.randn(m, n, device="cuda")
    w = (
        torch.ones(n, device="cuda")
        if inputs == "unit"
        else 1 + 0.5 * torch.randn(n, device="cuda")
    )
    dy = torch.randn(m, n, device="cuda")
    _, _, _, dw_ref, _ = oracle(x, w, dy)
    errors = {}
    for name, fn in {
        "ours": lambda a, b: rk.rmsnorm(a, b, 1e-6),
        "torch": lambda a, b: torch.nn.functional.rms_norm(a, (n,), b, 1e-6),
    }.items():
        wl = w.detach().requires_grad_()
        (dw,) = torch.autograd.grad(fn(x, wl), (wl,), dy)
        errors[name] = (dw.double() - dw_ref).abs().max().item()
    assert errors["ours"] <= errors["torch"], errors


def test_tensors_on_another_gpu_than_the_current_one():
    """A model split over GPUs in one process (Hugging Face's device_map="auto"): tensors on
    cuda:1 while cuda:0 is current, through the compiled and then the cached launches."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    torch.cuda.set_device(0)
    for _ in range(3):  # the first call compiles, the next ones take the cached handles
        x = torch.randn(33, 1000, device="cuda:1", dtype=torch.bfloat16)
        w = torch.randn(1000, device="cuda:1", dtype=torch.bfloat16)
        check_against_oracle(x, w, torch.bfloat16)
    assert torch.cuda.current_device() == 0

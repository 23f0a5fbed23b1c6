"""Programmatic dependent launch (config.PDL): the backward heuristic takes it on Hopper only, an
explicit PDL config is refused by name elsewhere, the launch cache keys it apart, and on the GPU
every kernel gives the bits of its launch without it, also right after a kernel that writes the
inputs and inside a CUDA graph."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig
from rmsnorm_kernel.contract import ContractValueError
from rmsnorm_kernel.launch import CachedKernel

EPS = 1e-6


def test_the_interpreter_heuristics_never_take_pdl():
    assert not config.forward_config(64, 4096, None).pdl
    assert not config.backward_config(64, 4096, None).pdl
    assert not config.pdl_here(None)


def test_an_explicit_pdl_config_is_refused_by_name_where_it_cannot_run():
    if torch.cuda.is_available():
        pytest.skip("CPU tensors in Triton's interpreter: a machine without CUDA")
    x = torch.randn(8, 64)
    w = torch.randn(64)
    with pytest.raises(ContractValueError, match=r"ForwardConfig\.pdl needs compiled kernels"):
        ops.launch_forward(x, w, None, EPS, 0.0, x.dtype, config=ForwardConfig(64, 0, 4, pdl=True))
    _, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, x.dtype)
    bad = dataclasses.replace(config.backward_config(8, 64, None), pdl=True)
    with pytest.raises(ContractValueError, match=r"BackwardConfig\.pdl needs compiled kernels"):
        ops.launch_backward(torch.randn(8, 64), x, w, rstd, 0.0, None, x.dtype, config=bad)


def test_the_launch_key_separates_pdl():
    kernel = CachedKernel(lambda: None)
    args = (torch.empty(4), 7)
    plain = kernel.key(args, (True,), 4, 1, 0)
    assert kernel.key(args, (True,), 4, 1, 0, pdl=True) != plain
    assert kernel.key(args, (True,), 4, 1, 0, pdl=False) == plain


# ---- GPU: same bits with and without PDL, on every kernel the heuristics pick -------------------

#: (M, N, dtype): one-row forward + TMA backward (4096 bf16), several-rows forward + tree (256),
#: chunked forward + row-dot and column tiles (40000), column strips (small M), pointer backward
#: with the sum launch (2048 bf16), float32 TMA (4096 fp32).
SHAPES = [
    (8192, 4096, torch.bfloat16),
    (4096, 256, torch.float32),
    (64, 40000, torch.bfloat16),
    (128, 257, torch.float32),
    (8192, 2048, torch.bfloat16),
    (4096, 4096, torch.float32),
]


def _run(x, w, dy, pdl):
    m, n = x.shape
    index = x.device.index
    fcfg = dataclasses.replace(config.forward_config(m, n, index), pdl=pdl)
    y, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, x.dtype, config=fcfg)
    least = config.tma_from(n, x.element_size())
    tma = ops.tma_ready(x, n) and least is not None and m >= least
    bcfg = config.backward_config(m, n, index, itemsize=x.element_size(), tma=tma)
    bcfg = dataclasses.replace(bcfg, pdl=pdl)
    dx, dw = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=bcfg)
    return y, rstd, dx, dw


@pytest.mark.gpu
def test_hopper_heuristics_take_pdl():
    index = torch.cuda.current_device()
    if not config.hopper(index):
        pytest.skip("PDL needs Hopper or newer")
    assert config.backward_config(4096, 4096, index).pdl  # the sum launch
    assert not config.forward_config(4096, 4096, index).pdl  # an explicit option only


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "dtype"), SHAPES, ids=str)
def test_pdl_gives_the_bits_of_the_launch_without_it(m, n, dtype):
    if not config.hopper(torch.cuda.current_device()):
        pytest.skip("PDL needs Hopper or newer")
    gen = torch.Generator(device="cuda").manual_seed(m + n)
    a = torch.randn(m, n, device="cuda", generator=gen)
    w = (1 + 0.3 * torch.randn(n, device="cuda", generator=gen)).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    x = (a * 1.5).to(dtype)  # written by the kernel just before the first launch
    expected = _run(x, w, dy, pdl=False)
    for _ in range(3):
        x = (a * 1.5).to(dtype)  # a fresh x, written right before the PDL forward reads it
        got = _run(x, w, dy, pdl=True)
        for name, e, g in zip(("y", "rstd", "dx", "dweight"), expected, got, strict=True):
            assert torch.equal(e, g), name


@pytest.mark.gpu
def test_pdl_waits_for_a_long_kernel_that_writes_x():
    """A matmul writes x; the norm launched right after it with PDL must read the finished x."""
    if not config.hopper(torch.cuda.current_device()):
        pytest.skip("PDL needs Hopper or newer")
    a = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    x = torch.mm(a, b)
    expected = ops.launch_forward(x, w, None, EPS, 0.0, x.dtype)[0]
    cfg = dataclasses.replace(config.forward_config(8192, 4096, x.device.index), pdl=True)
    for _ in range(5):
        x = torch.mm(a, b)
        y = ops.launch_forward(x, w, None, EPS, 0.0, x.dtype, config=cfg)[0]
        assert torch.equal(y, expected)


@pytest.mark.gpu
def test_pdl_inside_a_cuda_graph():
    """Forward + backward with PDL captured in a CUDA graph replays to the eager launches' bits
    without PDL, on fresh inputs each replay."""
    if not config.hopper(torch.cuda.current_device()):
        pytest.skip("PDL needs Hopper or newer")
    m, n, dtype = 8192, 4096, torch.bfloat16
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _run(x, w, dy, pdl=True)  # warm: compiles outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _run(x, w, dy, pdl=True)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        eager = _run(x, w, dy, pdl=False)
        for name, e, g in zip(("y", "rstd", "dx", "dweight"), eager, captured, strict=True):
            assert torch.equal(e, g), name

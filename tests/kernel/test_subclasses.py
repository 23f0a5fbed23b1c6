"""Tensor subclasses reach the kernels through dispatch, never as raw memory.

A ``__torch_dispatch__`` wrapper subclass (PyTorch's composite-compliance tests wrap every
argument in one; so do quantisation and offloading libraries) may have no storage: reading its
data pointer failed with "Attempted to access the data pointer on an invalid python storage".
Such inputs now go through the registered op (which the wrapper unwraps and calls again on its
plain tensors), and such gradients through the PyTorch-ops backward.
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close
from torch.utils._pytree import tree_map

import rmsnorm_kernel as rk


class Wrapper(torch.Tensor):
    """A storage-less wrapper: every op runs on the wrapped tensor and re-wraps the results."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(
            cls,
            inner.shape,
            strides=inner.stride(),
            dtype=inner.dtype,
            device=inner.device,
            requires_grad=inner.requires_grad,
        )

    def __init__(self, inner: torch.Tensor):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, Wrapper) else t  # noqa: E731
        wrap = lambda t: Wrapper(t) if isinstance(t, torch.Tensor) else t  # noqa: E731
        return tree_map(wrap, func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {})))


def _plain(t):
    return t.inner if isinstance(t, Wrapper) else t


@pytest.mark.parametrize("wrapped", ["x", "weight", "residual"])
def test_a_wrapped_input_runs_the_kernel_through_dispatch(wrapped, device):
    gen = torch.Generator().manual_seed(0)
    x, w, r = (torch.randn(s, generator=gen).to(device) for s in ((6, 40), (40,), (6, 40)))
    args = {"x": x, "weight": w, "residual": r}
    args[wrapped] = Wrapper(args[wrapped])
    y, h = rk.rmsnorm(args["x"], args["weight"], 1e-6, residual=args["residual"])
    assert isinstance(y, Wrapper)
    want_y, want_h = rk.rmsnorm(x, w, 1e-6, residual=r)
    assert torch.equal(_plain(y), want_y) and torch.equal(_plain(h), want_h)  # the same kernel


def test_the_drop_in_takes_wrapped_inputs_as_f_rms_norm_does(device):
    x, w = torch.randn(2, 3, 8, device=device), torch.randn(3, 8, device=device)
    y = rk.rms_norm(Wrapper(x), (3, 8), Wrapper(w), 0.5)
    assert_close(_plain(y), torch.nn.functional.rms_norm(x, (3, 8), w, 0.5), torch.float32, "y")


@pytest.mark.parametrize("rounding", ["torch", "llama"])
@pytest.mark.parametrize("residual", [False, True])
def test_a_wrapped_gradient_gets_the_kernel_backward_through_dispatch(residual, rounding, device):
    """Plain inputs, a wrapped upstream gradient (what the composite-compliance backward test
    does): the backward no longer reads its memory but calls the registered backward op, which
    the wrapper unwraps: the same kernel, the same bits."""
    gen = torch.Generator().manual_seed(1)
    x, r, dy = (torch.randn(6, 40, generator=gen).to(device) for _ in range(3))
    x = x.requires_grad_()
    w = torch.randn(40, generator=gen).to(device).requires_grad_()

    def grads(upstream):
        out = rk.rmsnorm(x, w, 1e-6, residual=r if residual else None, rounding=rounding)
        y = out[0] if residual else out
        return torch.autograd.grad(y, (x, w), upstream)

    got, want = grads(Wrapper(dy)), grads(dy)
    assert all(isinstance(g, Wrapper) for g in got)
    assert torch.equal(_plain(got[0]), want[0]) and torch.equal(_plain(got[1]), want[1])


@pytest.mark.parametrize("wrapped", ["x", "tangent", "both"])
def test_a_wrapped_dual_keeps_its_tangent(wrapped, device):
    """Forward-mode AD with a wrapped primal or tangent (the composite-compliance forward-AD
    test): the op alone has no jvp and dropped the tangent (None); the transforms' Function,
    whose forward dispatches through the op, gives F.rms_norm's."""
    import torch.autograd.forward_ad as fwAD

    gen = torch.Generator().manual_seed(2)
    x, t = (torch.randn(2, 3, 8, generator=gen).to(device) for _ in range(2))
    w = torch.randn(8, generator=gen).to(device)
    px = Wrapper(x) if wrapped in ("x", "both") else x
    pt = Wrapper(t) if wrapped in ("tangent", "both") else t
    with fwAD.dual_level():
        y = rk.rmsnorm(fwAD.make_dual(px, pt), w, 0.5)
        tangent = fwAD.unpack_dual(y).tangent
        want = fwAD.unpack_dual(
            torch.nn.functional.rms_norm(fwAD.make_dual(x, t), (8,), w, 0.5)
        ).tangent
    assert tangent is not None
    assert_close(_plain(tangent), want, torch.float32, "tangent")

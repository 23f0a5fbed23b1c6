"""The first-order backward written in PyTorch ops, so that autograd can differentiate it again.

The Triton backward is a black box to autograd: its dx and dweight carry no graph. When a graph is
being built through the backward (``create_graph=True``: gradient penalties, Hessian-vector
products, ``torch.autograd.gradgradcheck``), or the backward itself is vmapped (batched gradients,
``is_grads_batched=True``), :mod:`rmsnorm_kernel.function` calls
:func:`differentiable_backward` instead, which recomputes the inverse RMS from the saved input
with autograd tracking. Ordinary training (no ``create_graph``) never comes here.

Math, per row of ``N`` values (``h`` is x, or the returned x + residual; ``s = offset + w``)::

    r  = 1 / sqrt(mean(h**2) + eps)
    n  = h * r                                  # the normalised row; y = n * s
    u  = dy * s
    dx = r * (u - n * mean(u * n))  (+ dh)      # = r*u - h*r**3*mean(u*h): the kernels' formula
    dw = sum_rows(dy * n)

This is the exact gradient of the forward as a function of ``(dy, dh, h, w)``, so its own
gradients are the exact second derivatives. Everything is computed in the kernels' accumulation
dtype (float64 for float64 outputs, else float32) and rounded to x's / the weight's dtype at the
end, as the kernels do.
"""

from __future__ import annotations

import torch

#: Passes through :func:`differentiable_backward` (the kernels' passes are counted in
#: ``rmsnorm_kernel.CALLS``, which this path leaves alone).
CALLS = {"differentiable_backward": 0}


_legacy_batched = getattr(torch._C._functorch, "is_legacy_batchedtensor", lambda t: False)

#: Tensor types whose memory the kernels read directly; any other subclass (a
#: ``__torch_dispatch__`` wrapper such as PyTorch's composite-compliance tensor, which may have no
#: storage at all) goes through the registered ops or PyTorch ops, which dispatch to it.
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def is_subclass(t: torch.Tensor | None) -> bool:
    """Whether ``t`` is a tensor of a type other than :data:`PLAIN_TENSORS` (None: no)."""
    return t is not None and type(t) not in PLAIN_TENSORS


def ops_backward_needed(*tensors: torch.Tensor | None) -> bool:
    """Whether a backward must run in PyTorch ops rather than the Triton kernels:

    - it builds a graph: grad mode is on inside the backward (the caller asked for
      ``create_graph=True``) and one of the backward's inputs requires grad; or
    - it is being vmapped: a ``torch.func`` transform is active inside the backward, or a
      gradient is a batched tensor of the legacy vmap that
      ``torch.autograd.grad(..., is_grads_batched=True)`` runs the backward under
      (``gradcheck``'s batched-gradient check, ``torch.autograd.functional.jacobian(
      vectorize=True)``). Batched tensors have no storage for a kernel to read.
    """
    if torch._C._are_functorch_transforms_active():
        return True
    grad_mode = torch.is_grad_enabled()
    for t in tensors:  # (a loop, not any() over generators: this runs in every backward)
        if t is not None and (_legacy_batched(t) or (grad_mode and t.requires_grad)):
            return True
    return False


def differentiable_backward(
    dy: torch.Tensor,
    dh: torch.Tensor | None,
    saved: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    x_dtype: torch.dtype,
    acc_dtype: torch.dtype | None = None,
    llama: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(dx [..., N] in x_dtype, dweight (N,) in weight.dtype or None)``, differentiable.

    Args:
        dy: upstream gradient of ``y``, ``[..., N]`` (any layout).
        dh: upstream gradient of the returned ``x + residual``, or ``None``.
        saved: the normalised input as autograd knows it: ``x`` itself (an input of the
            forward), or the returned ``x + residual`` (an output: its gradient flows back through
            the forward's node to x and residual).
        weight: ``(N,)`` or ``None``; the forward's input itself, so gradients reach it.
        eps, offset: the forward's.
        x_dtype: x's dtype: dx's, and what ``llama`` rounds to.
        acc_dtype: the kernels' accumulation dtype (the saved rstd's dtype); default: float64 for
            float64 x, else float32.
        llama: the forward rounded ``n`` to ``x_dtype`` before the weight (Llama's rule): the
            weight's gradient sums ``dy * round(n)``, and the rounding is straight-through for dx.
    """
    CALLS["differentiable_backward"] += 1
    acc = acc_dtype
    if acc is None:
        acc = torch.float64 if x_dtype == torch.float64 else torch.float32
    h = saved.to(acc)
    r = torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)  # (..., N) -> (..., 1)
    n = h * r
    n_w = n  # the value the weight multiplied in the forward
    if llama:  # rounded to x's dtype, straight-through (the rounding's derivative taken as 1)
        n_w = n + (n.to(x_dtype).to(acc) - n).detach()
    g = dy.to(acc)
    u = g if weight is None else g * (weight.to(acc) + offset)
    dx = r * (u - n * (u * n).mean(-1, keepdim=True))
    if dh is not None:
        dx = dx + dh.to(acc)
    dw = None
    if weight is not None:
        dw = (g * n_w).reshape(-1, h.shape[-1]).sum(0).to(weight.dtype)  # a sum over rows
    return dx.to(x_dtype), dw

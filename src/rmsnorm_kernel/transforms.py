"""``torch.func`` transforms and forward-mode AD: an ``autograd.Function`` that supports them.

The eager path (:class:`rmsnorm_kernel.function.RMSNormFunction`) keeps the lowest host cost:
old-style ``forward(ctx, ...)``, the Triton backward. ``torch.func`` (``grad``, ``vjp``,
``jacrev``, ``jacfwd``, ``jvp``, ``vmap``) needs a ``setup_context`` staticmethod and, for
``vmap``, a batching rule; forward-mode AD (``torch.autograd.forward_ad``) needs a ``jvp``.
:func:`rmsnorm_kernel.rmsnorm` routes here while a ``torch.func`` transform is active or an input
carries a forward-mode tangent, and only then.

What runs where:

- **forward**: the Triton forward, as in eager mode (same launch, same output bits).
- **backward** (reverse mode under a transform): :func:`.double_backward.differentiable_backward`,
  the exact first-order backward in PyTorch ops. A transform may batch it (``vmap(grad(f))``:
  per-sample gradients) or differentiate it again (``jacrev(jacrev(f))``), which the Triton
  backward cannot be; it is the formula the kernels compute, in the kernels' accumulation dtype.
- **jvp** (forward mode), per row of ``h = x (+ residual)``, ``r = 1 / sqrt(mean(h**2) + eps)``,
  ``n = h * r``, ``s = offset + w``::

      n' = r * (h' - n * mean(n * h'))
      y' = n' * s + n_w * w'       (n_w = n, or n rounded to x's dtype with rounding="llama":
                                    the rounding is straight-through, as in the backward)

  in the same accumulation dtype, rounded to the output's dtype.
- **vmap**: x and residual may be batched along any dim (it is moved to the front: one larger
  launch); a batched weight (model ensembles, ``torch.func.stack_module_state``) takes one launch
  per batch element.
"""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from .double_backward import differentiable_backward


def needed(*tensors: torch.Tensor | None) -> bool:
    """Whether a ``torch.func`` transform is active, or an input carries a forward-mode tangent
    (inside ``forward_ad.dual_level``): then the eager fast path would drop a tangent or fail."""
    if torch._C._are_functorch_transforms_active():
        return True
    if getattr(forward_ad, "_current_level", 0) < 0:  # no dual level open (the usual case)
        return False
    return any(t is not None and forward_ad.unpack_dual(t).tangent is not None for t in tensors)


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _to_front(t: torch.Tensor, bdim: int | None, size: int) -> torch.Tensor:
    """A vmapped tensor with its batch dim first (an unbatched one expanded to ``size``)."""
    if bdim is None:
        return t.expand(size, *t.shape)
    return t.movedim(bdim, 0)


class FuncRMSNormFunction(torch.autograd.Function):
    """``apply(x, weight, eps, offset, residual, llama)`` -> ``y``, or ``(y, x + residual)``;
    shapes and dtypes as :func:`rmsnorm_kernel.rmsnorm`."""

    @staticmethod
    def forward(x, weight, eps, offset, residual, llama):
        from .function import _forward, _through_op  # function imports this module

        if _through_op(x, weight, residual):  # a subclass, fake or meta input: dispatched
            y, h, _ = torch.ops.rmsnorm_kernel.rmsnorm_fwd(x, weight, residual, eps, offset, llama)
            return y if residual is None else (y, h)
        # The backward recomputes in PyTorch ops: rstd is not needed.
        y, h, _, _, _ = _forward(x, weight, residual, eps, offset, llama, keep_rstd=False)
        return y if h is None else (y, h)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, eps, offset, residual, llama = inputs
        h = None if residual is None else output[1]
        ctx.save_for_backward(x if h is None else h, weight)
        ctx.save_for_forward(x, weight, residual)
        ctx.eps, ctx.offset, ctx.llama = eps, offset, llama
        ctx.x_dtype, ctx.has_residual = x.dtype, residual is not None

    @staticmethod
    def backward(ctx, dy, dh=None):
        saved, weight = ctx.saved_tensors
        dx, dw = differentiable_backward(
            dy, dh, saved, weight, ctx.eps, ctx.offset, ctx.x_dtype, _acc(ctx.x_dtype), ctx.llama
        )
        return dx, dw, None, None, (dx if ctx.has_residual else None), None

    @staticmethod
    def jvp(ctx, x_t, w_t, _eps_t, _offset_t, res_t, _llama_t):
        x, weight, residual = ctx.saved_tensors
        acc = _acc(x.dtype)
        h = x.to(acc) if residual is None else (x + residual).to(acc)
        h_t = _sum_tangents(x_t, res_t, h)
        r = torch.rsqrt(h.square().mean(-1, keepdim=True) + ctx.eps)
        n = h * r
        n_t = r * (h_t - n * (n * h_t).mean(-1, keepdim=True))
        if weight is None:
            y_t, out = n_t, x.dtype
        else:
            out = torch.promote_types(weight.dtype, x.dtype) if ctx.llama else x.dtype
            y_t = n_t * (weight.to(acc) + ctx.offset)
            if w_t is not None:
                n_w = n.to(x.dtype).to(acc) if ctx.llama else n
                y_t = y_t + n_w * w_t.to(acc)
        y_t = y_t.to(out)
        if residual is None:
            return y_t
        return y_t, h_t.to(x.dtype)

    @staticmethod
    def vmap(info, in_dims, x, weight, eps, offset, residual, llama):
        x_bdim, w_bdim, _, _, r_bdim, _ = in_dims
        size = info.batch_size
        x = _to_front(x, x_bdim, size)
        if residual is not None:
            residual = _to_front(residual, r_bdim, size)
        out_dims = 0 if residual is None else (0, 0)
        if w_bdim is None:  # one launch over every batch element's rows
            return FuncRMSNormFunction.apply(x, weight, eps, offset, residual, llama), out_dims
        # A batched weight (model ensembles: torch.func.stack_module_state): one launch per
        # batch element, each with its own weight.
        weight = weight.movedim(w_bdim, 0)
        outs = [
            FuncRMSNormFunction.apply(
                x[i], weight[i], eps, offset, None if residual is None else residual[i], llama
            )
            for i in range(size)
        ]
        if residual is None:
            return torch.stack(outs), out_dims
        return (torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])), out_dims


def _sum_tangents(x_t, res_t, like: torch.Tensor) -> torch.Tensor:
    """The tangent of ``x (+ residual)`` in ``like``'s dtype (a missing tangent is zero)."""
    t = torch.zeros_like(like) if x_t is None else x_t.to(like.dtype)
    return t if res_t is None else t + res_t.to(like.dtype)

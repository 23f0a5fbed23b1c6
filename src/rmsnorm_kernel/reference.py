"""The float64-capable PyTorch oracle every kernel path is tested against (the tutorial's).

Math, per row of ``N`` values (``x`` has shape ``[..., N]``)::

    r  = 1 / sqrt(mean(x**2) + eps)                 # one inverse RMS per row
    y  = x * r * (offset + w)                       # w: one weight per column (or none)

    u  = dy * (offset + w)
    dx = r * u - x * r**3 * mean(u * x)             # mean over the N columns of the row
    dw = sum_rows(dy * x * r)                       # a SUM over rows, never a mean
"""

from __future__ import annotations

import torch


def rmsnorm_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    offset: float = 0.0,
) -> torch.Tensor:
    """Readable RMSNorm, differentiable by autograd.

    Args:
        x: ``[..., N]`` floating tensor.
        weight: ``[N]`` (any floating dtype) or ``None`` for no scaling.
        eps: added to ``mean(x**2)`` before the square root.
        offset: Gemma-style scale ``offset + weight`` (0 is the plain RMSNorm).

    Returns:
        ``[..., N]`` in ``x.dtype``. Computed in float64 when ``x`` is float64, else in float32.
    """
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(dtype)
    r = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)  # (..., N) -> (..., 1)
    y = xf * r
    if weight is not None:
        y = y * (weight.to(dtype) + offset)
    return y.to(x.dtype)


def manual_backward(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """The tutorial's explicit backward, 2-D ``x (M, N)`` -> ``(dx (M, N), dweight (N,))``.

    Computes in the dtype of its arguments (no upcast), exactly as the tutorial writes it.
    """
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)  # (M, N) -> (M, 1)
    u = dy * weight
    dx = r * u - x * r.pow(3) * (u * x).mean(-1, keepdim=True)
    dweight = (dy * x * r).sum(0)  # (M, N) -> (N,)
    return dx, dweight

"""What the kernels compute, written in PyTorch ops: the graph ``torch.onnx.export`` records.

A Triton kernel cannot be exported to ONNX (no ONNX function exists for this package's ops), so
while ``torch.onnx.is_in_onnx_export()`` the entry points compute this instead; the exported
model then holds standard ops with the kernels' arithmetic (float32 accumulation, float64 for
float64 rows, the same roundings), which any ONNX runtime runs. The one other use: tracing under
``torch.compile`` while a ``torch.func`` transform is active (Dynamo inlines the transform, and
only plain ops get functorch's rules there; see :func:`rmsnorm_kernel.function.rmsnorm`).
"""

from __future__ import annotations

import torch

from .ops import output_dtype


def export_formula(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    residual: torch.Tensor | None,
    llama: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``x [..., N]`` (and ``residual`` like it) -> ``y`` in :func:`ops.output_dtype`'s dtype,
    or ``(y, h)`` with ``h = x + residual`` in their promoted dtype (the normalised tensor)."""
    if residual is not None:
        h_dtype = torch.promote_types(x.dtype, residual.dtype)
        acc = torch.float64 if h_dtype == torch.float64 else torch.float32
        x = (x.to(acc) + residual.to(acc)).to(h_dtype)  # h, rounded as the kernels store it
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    if llama:
        y = y.to(x.dtype).to(acc)  # Llama's rounding of x * r before the weight
    if weight is not None:
        y = y * (weight.to(acc) + offset)
    y = y.to(output_dtype(x, weight, llama))
    return y if residual is None else (y, x)

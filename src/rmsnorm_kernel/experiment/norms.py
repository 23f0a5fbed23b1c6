"""The reference branch as a module: the seed's oracle behind ``torch.nn.RMSNorm``'s interface."""

from __future__ import annotations

import numbers

import torch
from torch import nn

from rmsnorm_kernel import rmsnorm_reference


class ReferenceRMSNorm(nn.Module):
    """``y = x * rsqrt(mean(x**2, -1) + eps) * weight`` through :func:`rmsnorm_reference`.

    Same constructor and ``state_dict`` (``weight``, initialised to ones) as ``torch.nn.RMSNorm``,
    for a 1-D ``normalized_shape``. Autograd differentiates the oracle (float32 compute for
    float32 input), so this branch never touches the Triton wrapper.
    """

    def __init__(
        self,
        normalized_shape: int | tuple[int],
        eps: float = 1e-6,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        if len(normalized_shape) != 1:
            raise ValueError(
                f"ReferenceRMSNorm normalises one trailing dim (got {tuple(normalized_shape)})"
            )
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps = 1e-6 if eps is None else float(eps)
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            ones = torch.ones(self.normalized_shape, device=device, dtype=dtype)
            self.weight = nn.Parameter(ones)
        else:
            self.register_parameter("weight", None)  # the oracle then skips the scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (..., N)`` -> ``(..., N)`` in ``x.dtype``."""
        return rmsnorm_reference(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        affine = self.elementwise_affine
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={affine}"

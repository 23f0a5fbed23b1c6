"""The reference branch as a module: the tutorial's oracle behind torch.nn.RMSNorm's interface."""

from __future__ import annotations

import torch

from rmsnorm_kernel import RMSNorm, rmsnorm_reference


class ReferenceRMSNorm(RMSNorm):
    """``y = x * rsqrt(mean(x**2, -1) + eps) * weight`` through :func:`rmsnorm_reference`.

    Same constructor and ``state_dict`` (``weight``, initialised to ones) as ``torch.nn.RMSNorm``
    (it reuses :class:`rmsnorm_kernel.RMSNorm`'s), for a 1-D ``normalized_shape``. Autograd
    differentiates the oracle (float32 compute for float32 input), so this branch never touches
    the Triton wrapper.
    """

    def __init__(
        self,
        normalized_shape: int | tuple[int],
        eps: float | None = 1e-6,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, device, dtype)
        if len(self.normalized_shape) != 1:
            raise ValueError(
                f"ReferenceRMSNorm normalises one trailing dim (got {self.normalized_shape})"
            )
        self.eps = 1e-6 if eps is None else float(eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (..., N)`` -> ``(..., N)`` in ``x.dtype``."""
        return rmsnorm_reference(x, self.weight, self.eps)

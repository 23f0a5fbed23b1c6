"""``RMSNorm``: a drop-in for ``torch.nn.RMSNorm`` that runs the Triton kernels."""

from __future__ import annotations

import numbers

import torch
from torch import nn

from .contract import ContractValueError
from .function import rmsnorm


class RMSNorm(nn.Module):
    """Same constructor, attributes and ``state_dict`` (``weight``) as ``torch.nn.RMSNorm``.

    Args:
        normalized_shape: the trailing shape normalised over (an int, or a tuple for several dims,
            which are flattened into one row of ``N = prod(normalized_shape)`` values).
        eps: > 0, or ``None`` for ``torch.finfo(x.dtype).eps`` at call time.
        elementwise_affine: learn a ``weight`` of ``normalized_shape``, initialised to ones.
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(
                torch.empty(self.normalized_shape, device=device, dtype=dtype)
            )
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., *normalized_shape]`` -> same shape."""
        k = len(self.normalized_shape)
        if tuple(x.shape[x.dim() - k :]) != self.normalized_shape or x.dim() < k:
            raise ContractValueError(
                f"x's trailing dims must equal normalized_shape {self.normalized_shape} "
                f"(got shape {tuple(x.shape)})"
            )
        weight = self.weight
        if k != 1:  # flatten the normalised dims into one row (a view when the layout allows)
            x_rows = x.flatten(x.dim() - k) if k > 0 else x.unsqueeze(-1)
            weight = None if weight is None else weight.reshape(-1)
            return rmsnorm(x_rows, weight, self.eps).view(x.shape)
        return rmsnorm(x, weight, self.eps)

    def extra_repr(self) -> str:
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(
            **self.__dict__
        )

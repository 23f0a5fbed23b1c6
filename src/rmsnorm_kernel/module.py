"""``RMSNorm`` and ``rms_norm``: drop-ins for ``torch.nn.RMSNorm`` and
``torch.nn.functional.rms_norm`` that run the Triton kernels."""

from __future__ import annotations

import numbers

import torch
from torch import nn

from .contract import ContractValueError
from .function import rmsnorm


def _as_shape(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(d) for d in normalized_shape)


def rms_norm(
    input: torch.Tensor,  # noqa: A002 - torch.nn.functional.rms_norm's argument name
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> torch.Tensor:
    """Same signature as ``torch.nn.functional.rms_norm``.

    ``input [..., *normalized_shape]`` -> same shape and dtype. Several normalised dims are
    flattened into one row of ``N = prod(normalized_shape)`` values (a view when the layout
    allows). ``eps=None`` means ``torch.finfo(input.dtype).eps``.
    """
    shape = _as_shape(normalized_shape)
    k = len(shape)
    if k == 0 or input.dim() < k or tuple(input.shape[input.dim() - k :]) != shape:
        raise ContractValueError(
            f"input's trailing dims must equal normalized_shape {shape} "
            f"(got shape {tuple(input.shape)})"
        )
    if weight is not None and tuple(weight.shape) != shape:
        raise ContractValueError(
            f"weight must have shape normalized_shape = {shape} (got {tuple(weight.shape)})"
        )
    if k == 1:
        return rmsnorm(input, weight, eps)
    rows = input.flatten(input.dim() - k)
    y = rmsnorm(rows, None if weight is None else weight.reshape(-1), eps)
    return y.view(input.shape)


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
        self.normalized_shape = _as_shape(normalized_shape)
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
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(
            **self.__dict__
        )

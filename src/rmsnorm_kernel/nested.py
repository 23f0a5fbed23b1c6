"""Jagged nested tensors (``torch.nested``, ``layout=torch.jagged``): the norm of their values.

A jagged tensor ``(B, j, ..., N)`` keeps its rows packed in one dense ``values()`` tensor
``(sum of j, ..., N)`` beside the offsets of each sequence. Normalising over the last dim (dense,
never the ragged one) touches each row alone, so the kernels run on ``values()`` and the result
takes x's offsets again: what ``F.rms_norm`` returns for such an input, with gradients through
``values()`` (a differentiable view) to x's components. Nested tensors of the older strided
layout are left to PyTorch's own error (``F.rms_norm`` refuses them too).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .contract import ContractTypeError, ContractValueError


def is_jagged(t) -> bool:
    """Whether ``t`` is a nested tensor of the jagged layout."""
    return isinstance(t, torch.Tensor) and t.is_nested and t.layout == torch.jagged


def jagged_call(fn: Callable, x: torch.Tensor, residual, names: tuple[str, str]):
    """``fn(values, residual_values)`` over the rows of a jagged ``x`` (and a jagged ``residual``
    of the same offsets, or None); each dense result comes back as a jagged tensor with x's
    offsets (``fn`` returns ``y`` or ``(y, h)``)."""
    xn = names[0]
    if x._ragged_idx == x.dim() - 1:
        raise ContractValueError(
            f"{xn} is a jagged nested tensor whose ragged dim is its last: the norm runs over "
            f"the last dim, which must be dense (got shape {tuple(x.shape)}); F.rms_norm "
            "refuses it too"
        )
    res_values = None
    if residual is not None:
        if not isinstance(residual, torch.Tensor):
            raise ContractTypeError(
                f"residual must be a torch.Tensor or None (got {type(residual).__name__})"
            )
        if not is_jagged(residual):
            got = f"layout {residual.layout}" if residual.is_nested else "a dense tensor"
            raise ContractTypeError(
                f"residual must be a jagged nested tensor beside a jagged {xn} (got {got})"
            )
        if residual._ragged_idx != x._ragged_idx or not _same_offsets(residual, x):
            raise ContractValueError(
                f"residual must have {xn}'s offsets and ragged dim (the same sequences): got "
                f"shapes {tuple(residual.shape)} and {tuple(x.shape)}"
            )
        res_values = residual.values()
    out = fn(x.values(), res_values)

    def wrap(values: torch.Tensor) -> torch.Tensor:
        return torch.nested.nested_tensor_from_jagged(
            values, x.offsets(), lengths=x.lengths(), jagged_dim=x._ragged_idx
        )

    if isinstance(out, tuple):
        return tuple(wrap(t) for t in out)
    return wrap(out)


def _same_offsets(a: torch.Tensor, b: torch.Tensor) -> bool:
    oa, ob = a.offsets(), b.offsets()
    if oa is ob:  # (the usual case: one made from the other, or both from one batch)
        return True
    la, lb = a.lengths(), b.lengths()
    if (la is None) != (lb is None) or oa.shape != ob.shape:
        return False
    return torch.equal(oa, ob) and (la is None or torch.equal(la, lb))

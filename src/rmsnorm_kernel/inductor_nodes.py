"""What the Inductor pass's rewrites ask of a post-grad FX node: its recorded value, provable
shape equality, views, dtype conversions."""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

from .contract import SUPPORTED_DTYPES

VIEWS = (
    torch.ops.aten.reshape.default,
    torch.ops.aten.view.default,
    torch.ops.aten._unsafe_view.default,
)
CONVERTS = (torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default)


def val(node: object):
    """The fake tensor Inductor recorded for a node, or None."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def same_shape(u: torch.Tensor, v: torch.Tensor) -> bool:
    """Equal shapes, provably (symbolic sizes under ``dynamic=True`` too; adds no guard)."""
    return len(u.shape) == len(v.shape) and statically_known_true(sym_eq(u.shape, v.shape))


def cast_to(node: object) -> torch.dtype | None:
    """The dtype ``node`` converts its one tensor input to, if it is a plain dtype conversion
    (``prims.convert_element_type``, or ``aten._to_copy`` with only a dtype) to a float dtype
    the kernels store; else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    if node.target not in CONVERTS:
        return None
    if node.target is CONVERTS[0]:
        dtype = node.args[1] if len(node.args) > 1 else node.kwargs.get("dtype")
    else:
        if len(node.args) != 1 or set(node.kwargs) - {"dtype"}:
            return None
        dtype = node.kwargs.get("dtype")
    return dtype if dtype in SUPPORTED_DTYPES else None

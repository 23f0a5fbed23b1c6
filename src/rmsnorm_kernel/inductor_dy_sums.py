"""The Inductor pass's fold of a norm backward's summed upstream gradient into the kernel.

In a transformer block the norm's output feeds several projections (q / k / v, or gate / up), so
its gradient ``dy`` is the sum of their input gradients: ``dy = (mm_q + mm_k) + mm_v`` (through
reshapes). Inductor fuses that sum into a PyTorch-ops norm's backward reduction; before our
opaque op it stays a pointwise kernel that reads the two or three GEMM outputs and writes dy,
which our kernel then reads again. Rewritten to ``rmsnorm_bwd(mm_q, ..., dy_b=mm_k, dy_c=mm_v)``:
the kernel reads the parts and forms dy itself.

Exact: Inductor's fused add computes ``(a + b) + c`` in float32 (float64 for float64) and
rounds once to dy's dtype; the kernel does the same sum in the same order and rounds once the
same way (``kernels.backward_parts._dy_sum``). That holds only where each part is a value stored in
its dtype anyway, whatever this rewrite does: so the parts must be GEMM outputs (``mm``, ``addmm``,
``bmm``, ``baddbmm``), through reshapes, or graph inputs; a pointwise part would have been fused
into the add unrounded. Under autocast the parts are bfloat16 GEMM outputs each widened to
float32 before a float32 sum: the kernel reads the bfloat16 values and rounds the sum to float32
(``dy_dtype``), which is what the widened sum was. With ``emulate_precision_casts`` Inductor
rounds the inner sum too: then only two-part sums are folded.
"""

from __future__ import annotations

import torch
from torch._inductor import config as inductor_config

from .contract import SUPPORTED_DTYPES
from .inductor_nodes import VIEWS, cast_to, same_shape, val

_ADD = torch.ops.aten.add.Tensor
#: Ops whose outputs Inductor always stores in their dtype (extern GEMM kernels).
_STORED = (
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten.baddbmm.default,
)


def _stored(node: object) -> bool:
    """Whether ``node``'s values exist in memory in its dtype whatever the pass does: a graph
    input or a GEMM output, through views."""
    while isinstance(node, torch.fx.Node) and node.target in VIEWS:
        node = node.args[0]
    if not isinstance(node, torch.fx.Node):
        return False
    return node.op == "placeholder" or (node.op == "call_function" and node.target in _STORED)


def _sum_of_two(node: object) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """``(a, b)`` if ``node`` is ``a + b`` with both of the result's shape, dtype and device (no
    broadcast, no type promotion, no ``alpha``) and used by one node only; else None."""
    if not (isinstance(node, torch.fx.Node) and node.target is _ADD and len(node.users) == 1):
        return None
    if len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    out = val(node)
    vals = [val(a) for a in node.args]
    if not all(isinstance(v, torch.Tensor) for v in (*vals, out)):
        return None
    if out.dtype not in SUPPORTED_DTYPES:
        return None
    for v in vals:
        if v.dtype != out.dtype or v.device != out.device or not same_shape(v, out):
            return None
    return node.args[0], node.args[1]


def _source(part: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node | None] | None:
    """``(stored, conversion or None)``: the stored value ``part`` is, itself or widened exactly
    by a conversion used only here (a bfloat16 GEMM output made float32 under autocast)."""
    if _stored(part):
        return part, None
    target = cast_to(part)
    if target is None or len(part.users) != 1:
        return None
    inner = part.args[0]
    inner_val = val(inner)
    if not (isinstance(inner_val, torch.Tensor) and _stored(inner)):
        return None
    if inner_val.dtype == target or torch.promote_types(inner_val.dtype, target) != target:
        return None
    return inner, part


def dy_parts(dy: object) -> tuple[list[torch.fx.Node], list[torch.fx.Node], torch.dtype] | None:
    """``(parts, gone, dtype)``: the two or three stored values whose sum ``dy`` is, in the order
    the fused add sums them (all of one dtype), the nodes that then go (additions, conversions;
    users first) and the sum's dtype; None if ``dy`` is not such a sum."""
    pair = _sum_of_two(dy)
    if pair is None:
        return None
    three = not getattr(inductor_config, "emulate_precision_casts", False)
    candidates = []
    for inner, other in (pair, pair[::-1]):
        inner_pair = _sum_of_two(inner) if three else None
        if inner_pair is not None:
            # (a + b) + c, or c + (a + b): the same float32 sum, rounded once
            candidates.append(([*inner_pair, other], [dy, inner]))
    candidates.append((list(pair), [dy]))
    for operands, adds in candidates:
        sources = [_source(p) for p in operands]
        if None in sources:
            continue
        parts = [stored for stored, _ in sources]
        if len({val(p).dtype for p in parts}) != 1:
            continue
        converts = [conv for _, conv in sources if conv is not None]
        return parts, list(dict.fromkeys(adds + converts)), val(dy).dtype  # x + x: once
    return None

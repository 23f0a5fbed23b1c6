"""The norm backward's incoming gradient as one GEMM chain (a rewrite of ``inductor_fusion``).

Where a norm's output feeds several linear layers (Llama's q, k and v projections; gate and up),
its gradient ``dy`` is the sum of their input gradients: ``dy = mm(ga, Wa) + mm(gb, Wb) (+ ...)``.
Around a PyTorch-ops norm Inductor fuses those additions into the norm's backward kernel; around
our opaque op each addition is its own kernel, which writes the GEMM output, reads it back and
writes the sum: two extra passes over an activation per addition. Here each such addition is
folded into the GEMM's epilogue instead, ``addmm(c, ga, Wa)`` with ``c`` the other addend (alpha
and beta 1): the GEMM reads ``c`` once and writes the sum. Values: the product is added to ``c``
before its one rounding where the graph rounded the product first (the same or closer to the
exact sum).

Applied only to additions whose one use is a norm backward's ``dy`` (directly, through a
reshape, or through further such additions), with both addends of the result's shape and dtype,
one of them a 2-D ``mm`` (through a reshape that only splits its rows) used nowhere else, and
the other contiguous. Under autocast a cast sits between a bfloat16 product and its float32 sum:
such graphs are left as they are (an addmm would round the sum to bfloat16).
"""

from __future__ import annotations

import torch
from torch._guards import detect_fake_mode
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .inductor_nodes import VIEWS as _VIEWS
from .inductor_nodes import same_shape as _same_shape
from .inductor_nodes import val as _val

_ADD = torch.ops.aten.add.Tensor
_MM = torch.ops.aten.mm.default
_ADDMM = torch.ops.aten.addmm.default
_RESHAPE = torch.ops.aten.reshape.default


def _gemm_behind(node: object) -> tuple[torch.fx.Node, torch.fx.Node | None] | None:
    """``(mm, reshape or None)`` if ``node`` is an ``mm`` output, or a reshape of one that keeps
    its last dim, and nothing else uses either; else None."""
    if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
        return None
    view = None
    if node.target in _VIEWS:
        view, node = node, node.args[0]
        if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
            return None
    if node.target is not _MM:
        return None
    product, out = _val(node), _val(view if view is not None else node)
    if product is None or out is None:
        return None
    if not statically_known_true(out.shape[-1] == product.shape[-1]):
        return None
    return node, view


def _fold(graph: torch.fx.Graph, add: torch.fx.Node) -> int:
    """Fold ``add`` (and the single-use additions below it, first) into GEMMs; returns how many
    additions were folded."""
    if add.target is not _ADD or len(add.users) != 1 or len(add.args) != 2:
        return 0
    if add.kwargs.get("alpha", 1) != 1:
        return 0
    done = sum(_fold(graph, operand) for operand in add.args)  # deepest first
    out = _val(add)
    for i in (0, 1):
        found = _gemm_behind(add.args[i])
        if found is not None:
            break
    else:
        return done
    mm, view = found
    other = add.args[1 - i]
    c, product = _val(other), _val(mm)
    if c is None or product is None or out is None:
        return done
    n = product.shape[-1]
    if not (
        c.dtype == product.dtype == out.dtype
        and _same_shape(c, out)
        and isinstance(n, int)
        and statically_known_true(c.is_contiguous())
    ):
        return done
    a, b = mm.args
    fake_mode = detect_fake_mode([c, product])
    if fake_mode is None:
        return done
    with fake_mode:
        c2_val = c.reshape(-1, n)
        sum_val = torch.ops.aten.addmm(c2_val, _val(a), _val(b))
    with graph.inserting_before(add):
        c2 = graph.call_function(_RESHAPE, (other, [-1, n]))
        result = summed = graph.call_function(_ADDMM, (c2, a, b))
        if view is not None:  # back to the sum's shape, as the product's reshape gave it
            result = graph.call_function(_RESHAPE, (summed, view.args[1]))
            result.meta["val"] = out
    c2.meta["val"], summed.meta["val"] = c2_val, sum_val
    add.replace_all_uses_with(result)
    graph.erase_node(add)
    if view is not None:
        graph.erase_node(view)
    graph.erase_node(mm)
    return done + 1


def fold_gemm_sums(graph: torch.fx.Graph, backward_op) -> int:
    """Fold the additions that make up each ``backward_op`` call's ``dy`` (its first argument)
    into GEMM epilogues; returns how many were folded."""
    done = 0
    for node in list(graph.nodes):
        if node.target is backward_op and node.args:
            dy = node.args[0]
            # through reshapes used only on the way (a 2-D sum viewed as dy's shape)
            while isinstance(dy, torch.fx.Node) and dy.target in _VIEWS and len(dy.users) == 1:
                dy = dy.args[0]
            if isinstance(dy, torch.fx.Node) and len(dy.users) == 1:
                done += _fold(graph, dy)
    return done

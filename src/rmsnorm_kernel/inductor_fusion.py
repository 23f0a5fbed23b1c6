"""Under ``torch.compile``: fold the additions next to the norm into our kernels (an Inductor pass).

Inductor fuses a PyTorch-ops RMSNorm with the pointwise ops around it, but our norm is an opaque
``torch.library`` op, so in a residual network two additions next to every norm stay separate
kernels, each a full extra pass over an activation:

- forward, the residual add before the norm: ``h = a + b; y = rmsnorm_fwd(h)``. Rewritten to
  ``y, h = rmsnorm_fwd(a, residual=b)``: one kernel reads a and b and writes h and y. ``b`` may
  be of a narrower dtype that converts exactly into ``a``'s (a bfloat16 block output added to a
  float32 residual stream under autocast), as the public ``rmsnorm(x, residual=r)`` allows.
- backward, the residual stream's gradient accumulation after the norm's backward:
  ``dx = rmsnorm_bwd(dy, ...)[0]; g2 = dx + g``. Rewritten to ``rmsnorm_bwd(dy, dh=g, ...)``:
  the kernel adds g to dx in float32 before its one rounding.

Under autocast with a float32 residual stream, two casts sit next to the norm as well:

- forward, ``y = rmsnorm_fwd(h)`` (float32) used only through ``y.to(bfloat16)`` (the next
  GEMMs' input): the kernel stores bfloat16 itself (``out_dtype``), the same one rounding of the
  same values, without writing float32 y, reading it back and a cast kernel;
- backward, ``rmsnorm_bwd(dy=g.to(float32))`` with g bfloat16 (that cast's gradient): the kernel
  reads g, whose values widen exactly (it converts every dy to float32 anyway).
- backward, ``dx = rmsnorm_bwd(...)[0]`` (float32, the residual stream's gradient) also used
  through ``dx.to(bfloat16)`` (the input gradient of the GEMMs before the norm): the kernel also
  stores that copy (``dx2_dtype``, the op's third output), the cast's one rounding of the same
  values, without reading dx back in a cast kernel.

And the sum of GEMM outputs that forms a norm backward's ``dy`` (the q / k / v, or gate / up,
projections' input gradients) goes into the backward kernel: it reads the two or three GEMM
outputs and forms dy itself, rounded as Inductor's fused add rounds it
(:mod:`.inductor_dy_sums`). With ``gemm_sums=True`` (opt-in; measured slower on the H200) that
sum goes into GEMM epilogues instead (:mod:`.inductor_gemm_sums`).

The residual, cast and gradient-sum rewrites keep every value (bit for bit, except the backward
accumulation, which rounds once where the graph rounded twice; on a GPU its ``dx * r + g`` may
also contract into one FMA) and change nothing else in the graph. They
apply only where shapes and devices of both operands match the result (no broadcast, no
``alpha``), the dtypes as said (the backward accumulation: all equal), and the order of the
graph allows it.

:func:`enable` installs the pass as Inductor's ``post_grad_custom_post_pass`` (a global
Inductor setting: one that was set already is kept and runs first); :func:`disable` restores
the previous setting. ``integrations.transformers.patch`` enables it when asked
(``patch(model, inductor_fusion=True)``); for one compile only, pass ``RMSNormFusionPass()`` in
``torch.compile(..., options={"post_grad_custom_post_pass": ...})``. :data:`REWRITES` counts
what it did, per kind.
"""

from __future__ import annotations

import logging
import operator

import torch
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import (
    function,  # noqa: F401  (registers the ops this pass rewrites)
    inductor_dy_sums,
    inductor_gemm_sums,
    inductor_nodes,
)
from .contract import SUPPORTED_DTYPES
from .inductor_nodes import cast_to as _cast_to
from .inductor_nodes import same_shape as _same_shape
from .inductor_nodes import val as _val
from .ops import _acc_dtype

__all__ = ["REWRITES", "RMSNormFusionPass", "disable", "enable", "enabled", "fuse_graph"]

log = logging.getLogger("rmsnorm_kernel")

#: Rewrites made since import (or the last ``reset``), per kind; tests read it.
REWRITES = {
    "forward_residual": 0,
    "backward_accumulate": 0,
    "forward_cast": 0,
    "backward_cast": 0,
    "backward_dy_sum": 0,
    "backward_dx_cast": 0,
    "backward_gemm_sum": 0,
}

_FWD = torch.ops.rmsnorm_kernel.rmsnorm_fwd.default
_BWD = torch.ops.rmsnorm_kernel.rmsnorm_bwd.default
_ADD = torch.ops.aten.add.Tensor


def _arguments(node: torch.fx.Node, op) -> dict[str, object]:
    """The call's arguments by schema name, defaults filled in."""
    values = {}
    for i, arg in enumerate(op._schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        else:
            values[arg.name] = node.kwargs.get(arg.name, arg.default_value)
    return values


def _with(node: torch.fx.Node, op, **changes) -> tuple[tuple, dict]:
    """``node``'s args and kwargs, as it passed them (Inductor's lowering expects that form),
    with the named arguments changed."""
    args, kwargs = list(node.args), dict(node.kwargs)
    for i, arg in enumerate(op._schema.arguments):
        if arg.name in changes:
            if i < len(args):
                args[i] = changes[arg.name]
            else:
                kwargs[arg.name] = changes[arg.name]
    return tuple(args), kwargs


def _residual_add(node: object) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """``(x, residual)`` if ``node`` is ``x + residual`` (either order) whose result has x's
    dtype, with a residual whose dtype converts into it exactly (bfloat16 or float16 into float32:
    the residual stream under autocast), both of the result's shape and device; else None. The
    kernel then adds them in x's dtype or wider and rounds once to x's dtype, as the add did."""
    if not (isinstance(node, torch.fx.Node) and node.target is _ADD):
        return None
    if len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    vals = [_val(a) for a in node.args]
    vout = _val(node)
    if not all(isinstance(v, torch.Tensor) for v in (*vals, vout)):
        return None
    if not all(_same_shape(v, vout) and v.device == vout.device for v in vals):
        return None
    for i in (0, 1):
        x, res = vals[i], vals[1 - i]
        if x.dtype == vout.dtype and torch.promote_types(res.dtype, x.dtype) == x.dtype:
            return node.args[i], node.args[1 - i]
    return None


def _plain_add(node: object) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """:func:`_residual_add`'s pair when both addends also share the result's dtype (the
    backward's accumulation: the kernel's one rounding then equals the add's)."""
    pair = _residual_add(node)
    if pair is None or _val(pair[0]).dtype != _val(pair[1]).dtype:
        return None
    return pair


def _getitems(node: torch.fx.Node) -> dict[int, list[torch.fx.Node]] | None:
    """The ``getitem`` users of a multi-output node by index; None if anything else uses it."""
    found: dict[int, list[torch.fx.Node]] = {}
    for user in node.users:
        if user.target is not operator.getitem:
            return None
        found.setdefault(user.args[1], []).append(user)
    return found


def _order(graph: torch.fx.Graph) -> dict[torch.fx.Node, int]:
    return {n: i for i, n in enumerate(graph.nodes)}


def _defined_before(nodes, position: int, order) -> bool:
    return all(order[n] < position for n in nodes if isinstance(n, torch.fx.Node))


def _replace(graph, old: torch.fx.Node, op, call: tuple, items: dict, after: torch.fx.Node):
    """A new call of ``op`` (``call``: its args and kwargs) right after ``after`` and a getitem per
    index of ``items``; each old getitem's users move to the new one (with its metadata).
    Returns the new node and the getitems by index."""
    with graph.inserting_after(after):
        new = graph.call_function(op, *call)
    new.meta.update(old.meta)
    taken = {}
    cursor = new
    for index, olds in sorted(items.items()):
        with graph.inserting_after(cursor):
            item = graph.call_function(operator.getitem, (new, index))
        for o in olds:
            item.meta.update(o.meta)
            o.replace_all_uses_with(item)
            graph.erase_node(o)
        taken[index] = cursor = item
    return new, taken


def _fuse_forward(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    args = _arguments(node, _FWD)
    add = args["x"]
    operands = _residual_add(add) if args["residual"] is None else None
    items = _getitems(node)
    if operands is None or items is None:
        return False
    if any(o.users for o in items.get(1, [])):  # output 1 (h) is empty here: must be unused
        return False
    if not statically_known_true(_val(add).is_contiguous()):  # the kernel returns h contiguous
        return False
    order = _order(graph)
    inputs = [args["weight"], *operands]
    if not _defined_before(inputs, order[add], order):
        return False
    a, b = operands
    new, taken = _replace(
        graph,
        node,
        _FWD,
        _with(node, _FWD, x=a, residual=b),
        {**items, 1: items.get(1, [])},
        after=add,
    )
    y_val, _, rstd_val = _val(node)
    new.meta["val"] = (y_val, _val(add), rstd_val)
    taken[1].meta["val"] = _val(add)
    add.replace_all_uses_with(taken[1])
    graph.erase_node(add)
    graph.erase_node(node)
    return True


def _fuse_backward(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    args = _arguments(node, _BWD)
    items = _getitems(node)
    if args["dh"] is not None or items is None or len(items.get(0, [])) != 1:
        return False
    dx = items[0][0]
    if len(dx.users) != 1:
        return False
    add = next(iter(dx.users))
    operands = _plain_add(add)
    if operands is None or operands[0] is operands[1]:
        return False
    g = operands[1] if operands[0] is dx else operands[0]
    dx_val, g_val = _val(dx), _val(g)
    if not _same_shape(g_val, dx_val) or g_val.dtype != dx_val.dtype:
        return False
    order = _order(graph)
    anchor = node if order[g] < order[node] else g
    # every other output's users must come after the new call
    later = [u for index, olds in items.items() if index != 0 for o in olds for u in o.users]
    if not all(order[u] > order[anchor] for u in later):
        return False
    new, taken = _replace(graph, node, _BWD, _with(node, _BWD, dh=g), items, after=anchor)
    add.replace_all_uses_with(taken[0])
    graph.erase_node(add)
    graph.erase_node(node)
    return True


def _fuse_forward_cast(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """``y = rmsnorm_fwd(...)[0]`` used only through conversions to one narrower dtype (the
    float32 norm output of a float32 residual stream cast to bfloat16 for the next GEMMs under
    autocast): the kernel stores that dtype itself. Exact where y's own dtype is the kernel's
    accumulator (y is then the accumulator's values, and the conversion was their one rounding);
    saves writing y, reading it back and the conversion's kernel."""
    args = _arguments(node, _FWD)
    items = _getitems(node)
    if args["out_dtype"] is not None or items is None or len(items.get(0, [])) != 1:
        return False
    y = items[0][0]
    y_val = _val(y)
    if not isinstance(y_val, torch.Tensor) or not y.users:
        return False
    targets = {_cast_to(u) for u in y.users}
    if len(targets) != 1 or None in targets:
        return False
    target = targets.pop()
    if y_val.dtype != _acc_dtype(_val(args["x"]).dtype) or target.itemsize >= y_val.itemsize:
        return False
    node.args, node.kwargs = _with(node, _FWD, out_dtype=target)
    new_y = y_val.to(target)
    node.meta["val"] = (new_y, *_val(node)[1:])
    y.meta["val"] = new_y
    for cast in list(y.users):
        cast.replace_all_uses_with(y)
        graph.erase_node(cast)
    return True


def _fuse_backward_cast(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """``rmsnorm_bwd(dy=convert(g, float32))`` with g of a narrower float dtype (the gradient of
    that cast under autocast): the kernel reads g itself (its values convert exactly, and the
    kernel converts every dy to its accumulator anyway). Saves the conversion's write and read."""
    args = _arguments(node, _BWD)
    dy = args["dy"]
    if not isinstance(dy, torch.fx.Node) or _cast_to(dy) is None:
        return False
    g = dy.args[0]
    if not isinstance(g, torch.fx.Node):
        return False
    g_val, dy_val = _val(g), _val(dy)
    if not (isinstance(g_val, torch.Tensor) and isinstance(dy_val, torch.Tensor)):
        return False
    # g of another kernel dtype that converts exactly into dy's (a narrower one)
    exact = torch.promote_types(g_val.dtype, dy_val.dtype) == dy_val.dtype
    if g_val.dtype not in SUPPORTED_DTYPES or g_val.dtype == dy_val.dtype or not exact:
        return False
    if not (_same_shape(g_val, dy_val) and g_val.device == dy_val.device):
        return False
    node.args, node.kwargs = _with(node, _BWD, dy=g)
    if not dy.users:
        graph.erase_node(dy)
    return True


def _fuse_backward_dy_sum(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """``rmsnorm_bwd(dy=(a + b) + c)`` with stored parts: the kernel reads a, b and c
    (:func:`.inductor_dy_sums.dy_parts` says when that is exact)."""
    args = _arguments(node, _BWD)
    if args["dy_b"] is not None or args["dh"] is args["dy"]:  # (dh: the sum must stay)
        return False
    found = inductor_dy_sums.dy_parts(args["dy"])
    if found is None:
        return False
    parts, gone, dtype = found
    third = parts[2] if len(parts) == 3 else None
    wider = None if dtype == _val(parts[0]).dtype else dtype
    if _acc_dtype(dtype) != _acc_dtype(_val(args["saved"]).dtype):
        return False  # a sum the kernel's accumulator would not compute as Inductor did
    changes = {"dy": parts[0], "dy_b": parts[1], "dy_c": third, "dy_dtype": wider}
    node.args, node.kwargs = _with(node, _BWD, **changes)
    for done in gone:  # users first: each has no user left when erased
        graph.erase_node(done)
    return True


def _fuse_backward_dx_cast(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """``dx = rmsnorm_bwd(...)[0]`` (float32) also used through conversions to one narrower dtype
    (the residual stream's gradient cast to bfloat16 for the GEMMs before it, under autocast):
    the kernel stores that copy too (``dx2_dtype``, output 2). Exact: dx is the accumulator's
    values, and the conversion was their one rounding; saves reading dx back and a kernel."""
    args = _arguments(node, _BWD)
    items = _getitems(node)
    if args["dx2_dtype"] is not None or items is None or len(items.get(0, [])) != 1:
        return False
    if any(o.users for o in items.get(2, [])):  # output 2 is empty here: must be unused
        return False
    dx = items[0][0]
    dx_val = _val(dx)
    if not isinstance(dx_val, torch.Tensor) or dx_val.dtype != torch.float32:
        return False
    casts = [u for u in dx.users if _cast_to(u) is not None]
    targets = {_cast_to(u) for u in casts}
    if len(targets) != 1 or targets & {torch.float32, torch.float64}:
        return False
    target = targets.pop()
    node.args, node.kwargs = _with(node, _BWD, dx2_dtype=target)
    dx2_val = dx_val.to(target)
    node.meta["val"] = (*_val(node)[:2], dx2_val)
    for unused in items.get(2, []):
        graph.erase_node(unused)
    with graph.inserting_after(node):
        dx2 = graph.call_function(operator.getitem, (node, 2))
    dx2.meta["val"] = dx2_val
    for cast in casts:
        cast.replace_all_uses_with(dx2)
        graph.erase_node(cast)
    return True


def fuse_graph(graph: torch.fx.Graph, *, gemm_sums: bool = False) -> dict[str, int]:
    """Apply the rewrites to a post-grad FX graph in place; returns how many of each."""
    done = dict.fromkeys(REWRITES, 0)
    # A rewrite erases only its own call, an add and getitems, never a later norm call.
    for node in list(graph.nodes):
        if node.target is _FWD and _fuse_forward(graph, node):
            done["forward_residual"] += 1
        elif node.target is _BWD and _fuse_backward(graph, node):
            done["backward_accumulate"] += 1
    # After them: the residual rewrite replaces norm calls, and this one edits calls in place.
    for node in list(graph.nodes):
        if node.target is _FWD and _fuse_forward_cast(graph, node):
            done["forward_cast"] += 1
        elif node.target is _BWD and _fuse_backward_cast(graph, node):
            done["backward_cast"] += 1
    if gemm_sums:
        done["backward_gemm_sum"] = inductor_gemm_sums.fold_gemm_sums(graph, _BWD)
    # Last: after the cast rewrite, a bfloat16 sum under autocast is dy itself.
    for node in list(graph.nodes):
        if node.target is _BWD and _fuse_backward_dy_sum(graph, node):
            done["backward_dy_sum"] += 1
        if node.target is _BWD and _fuse_backward_dx_cast(graph, node):
            done["backward_dx_cast"] += 1
    for kind, n in done.items():
        REWRITES[kind] += n
    if any(done.values()):
        graph.lint()
    return done


class RMSNormFusionPass(CustomGraphPass):
    """Inductor's post-grad custom pass: runs ``previous`` (what was set before: one pass, a
    list of passes, or None), then :func:`fuse_graph` (``gemm_sums``: its third rewrite too).
    Its ``uuid`` keys Inductor's cache on the rewrites' sources, ``gemm_sums`` and the previous
    passes' own uuids."""

    def __init__(self, previous=None, *, gemm_sums: bool = False) -> None:
        if not isinstance(gemm_sums, bool):
            raise TypeError(f"gemm_sums must be True or False (got {gemm_sums!r})")
        self.previous = previous
        self.gemm_sums = gemm_sums

    def _before(self) -> tuple:
        if self.previous is None:
            return ()
        if isinstance(self.previous, (list, tuple)):
            return tuple(self.previous)
        return (self.previous,)

    def __call__(self, graph: torch.fx.Graph) -> None:
        for earlier in self._before():
            earlier(graph)
        fuse_graph(graph, gemm_sums=self.gemm_sums)

    def uuid(self):
        files = (
            __file__,
            inductor_gemm_sums.__file__,
            inductor_dy_sums.__file__,
            inductor_nodes.__file__,
        )
        parts = [get_hash_for_files(files).hex(), f"gemm_sums={self.gemm_sums}"]
        for earlier in self._before():
            theirs = earlier.uuid() if hasattr(earlier, "uuid") else None
            if theirs is None:
                return None  # a pass without a uuid: Inductor then bypasses its cache
            parts.append(str(theirs))
        return ":".join(parts)


def enabled() -> bool:
    """Whether Inductor's post-grad custom pass is ours now."""
    return isinstance(inductor_config.post_grad_custom_post_pass, RMSNormFusionPass)


def enable() -> None:
    """Install the pass (idempotent). Affects graphs compiled from now on."""
    if enabled():
        return
    previous = inductor_config.post_grad_custom_post_pass
    inductor_config.post_grad_custom_post_pass = RMSNormFusionPass(previous)
    log.info(
        "rmsnorm_kernel: Inductor pass installed (residual add and gradient accumulation "
        "folded into the norm kernels under torch.compile)%s",
        "" if previous is None else f"; it runs after the pass set before, {previous!r}",
    )


def disable() -> None:
    """Remove the pass, restoring whatever was set before :func:`enable`."""
    current = inductor_config.post_grad_custom_post_pass
    if isinstance(current, RMSNormFusionPass):
        inductor_config.post_grad_custom_post_pass = current.previous

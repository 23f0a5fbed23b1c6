"""The Triton kernels, and nothing else: forward (one row or several rows per program, or one
row over several programs of a cooperative launch or over the CTAs of a thread-block cluster),
backward (dx, and dweight finished in the same launch or by a second, fixed-order sum launch),
and the row reduction that wide backward rows need first.

Math for one row of ``N`` values (``ACC`` is float32, or float64 for float64 outputs)::

    r  = 1 / sqrt(sum(x*x) / N + eps)       # divide by N, the data width -- never by BLOCK
    y  = x * r * (offset + w)
    u  = dy * (offset + w)
    dx = (u - x * r*r * sum(u*x) / N) * r  (+ dh, the gradient of the returned x + residual)
    dw = sum over rows of dy * x * r        # per-program partials, then a fixed float64 sum

Every program follows the tutorial's rhythm: program id -> column offsets -> mask -> pointers ->
load as ACC -> reduce -> store. Row offsets are int64 so tensors over 2**31 elements are addressed
correctly.

Determinism: the only atomics are integer counters that decide WHICH program adds two dweight
partials (or, in the split-row forward, when a row's partial sums of squares are all there),
never the ORDER of float additions. The partials are summed over a fixed tree (a
node adds its children's slots in index order, whichever child arrives last to do it, so who
adds gives the same bits) or, in the second launch, column by column in row order; either way
dweight is bitwise reproducible whatever the scheduling.

One module per kind of kernel (its ``@triton.jit`` helpers beside it), in reading order:

- :mod:`.common`: what the kernels share (the PDL prologue, masked row loads and stores, exact
  widening of 16-bit floats, the cluster barrier);
- :mod:`.forward` (one row, or several short rows, per program), :mod:`.forward_split` (one row
  over the programs of a cooperative launch), :mod:`.forward_cluster` (one row over a
  thread-block cluster);
- :mod:`.backward_parts` (dx of a row, the dweight term, the in-launch dweight tree);
  :mod:`.backward` (the tile backward, in one launch, or after :mod:`.row_dot` for rows wider
  than a tile), :mod:`.backward_rows` (short rows), :mod:`.backward_tma` (short rows through
  tensor descriptors), :mod:`.backward_columns` (small M), :mod:`.backward_cluster` (wide rows
  over a cluster), and :mod:`.dweight_sum` (dweight's finish as a second launch).

The launchers (:mod:`rmsnorm_kernel.ops`) take the kernels from here.
"""

from __future__ import annotations

from .. import backend  # noqa: F401  (first: sets TRITON_INTERPRET before any @triton.jit runs)
from .backward import rmsnorm_backward_kernel
from .backward_cluster import rmsnorm_backward_cluster_kernel
from .backward_columns import rmsnorm_backward_columns_kernel
from .backward_rows import rmsnorm_backward_rows_kernel
from .backward_tma import rmsnorm_backward_tma_kernel
from .common import FP16_WIDEN_CVT
from .dweight_sum import dweight_sum_kernel
from .forward import WEIGHT_FIRST_MAX_BLOCK, rmsnorm_forward_kernel, rmsnorm_forward_rows_kernel
from .forward_cluster import rmsnorm_forward_cluster_kernel
from .forward_split import rmsnorm_forward_split_kernel, rmsnorm_forward_split_staged_kernel
from .row_dot import rmsnorm_row_dot_kernel

__all__ = [
    "FP16_WIDEN_CVT",
    "WEIGHT_FIRST_MAX_BLOCK",
    "dweight_sum_kernel",
    "rmsnorm_backward_cluster_kernel",
    "rmsnorm_backward_columns_kernel",
    "rmsnorm_backward_kernel",
    "rmsnorm_backward_rows_kernel",
    "rmsnorm_backward_tma_kernel",
    "rmsnorm_forward_cluster_kernel",
    "rmsnorm_forward_kernel",
    "rmsnorm_forward_rows_kernel",
    "rmsnorm_forward_split_kernel",
    "rmsnorm_forward_split_staged_kernel",
    "rmsnorm_row_dot_kernel",
]

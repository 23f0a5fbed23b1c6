"""The pieces the backward kernels share: dy plus the parts Inductor folded into the launch,
one row's dx, the dweight term, and the in-launch deterministic dweight finish (a fixed tree over
the programs' partials)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _dy_sum(dy, B_PTRS, C_PTRS, mask, DY_PARTS: tl.constexpr, DY_SUM: tl.constexpr, ACC):
    """dy's loaded values plus the parts the Inductor pass folded into the launch (the sum of
    GEMM outputs that formed dy): summed in ACC in the graph's order, (dy + b) + c, and rounded
    once to DY_SUM, the sum's dtype (the parts' own, or wider under autocast), as Inductor's
    fused add stored it. Returned in ACC."""
    if DY_PARTS == 1:
        return dy.to(ACC)
    total = dy.to(ACC) + tl.load(B_PTRS, mask=mask, other=0.0).to(ACC)
    if DY_PARTS == 3:
        total += tl.load(C_PTRS, mask=mask, other=0.0).to(ACC)
    return total.to(DY_SUM).to(ACC)


@triton.jit
def _dweight_tree_finish(
    acc,  # (BLOCK,) this program's partial, float64
    DW,  # pointer to the weight gradient (N,), weight dtype
    SLOTS,  # pointer to the partials (leaves, N): slot k of column c at SLOTS + k * N + c
    COUNTERS,  # pointer to this column tile's int32 counters (leaves,), zero on entry
    leaf,  # this program's leaf index (int32 scalar)
    leaves,  # number of leaves (programs along the row-group axis)
    N,
    cols,
    mask,
    FANOUT: tl.constexpr,  # children per tree node (2: a binary tree)
):
    """Sum the partials of all row groups over a fixed tree, inside the same launch.

    A node whose children each cover ``span`` leaves covers ``[first, first + FANOUT * span)``;
    its children start at ``first + k * span``. Every child stores its value in its slot and
    takes a ticket from the node's counter (an integer atomic); the last to arrive adds the
    children's slots in index order, so the node's value does not depend on who arrived last,
    and resets the counter to 0 for the next launch on this stream. Counter ``first + span``
    (the second child's first leaf) is unique per node: its remainder modulo the node's width is
    ``span``, which differs between levels.
    """
    base = leaf
    span = leaf * 0 + 1
    active = leaf >= 0  # an i1 scalar: still carrying a value up the tree
    while span < leaves:
        if active:
            first = base - base % (span * FANOUT)
            children = tl.minimum((leaves - first + span - 1) // span, FANOUT)
            if children > 1:
                tl.store(SLOTS + base.to(tl.int64) * N + cols, acc, mask=mask)
                tl.debug_barrier()  # every thread's slot store happens before the release below
                node = COUNTERS + first + span
                ticket = tl.atomic_add(node, 1, sem="acq_rel", scope="gpu")
                if ticket < children - 1:
                    active = ticket < 0  # not the last child: the last one finishes this node
                else:
                    tl.store(node, 0)
                    total = tl.zeros_like(acc)
                    for k in tl.static_range(FANOUT):
                        child = first + k * span
                        if child < leaves:
                            total += tl.load(
                                SLOTS + child.to(tl.int64) * N + cols,
                                mask=mask,
                                other=0.0,
                                cache_modifier=".cg",  # L2, never a stale L1 line
                            )
                    acc = total
            base = first
        span = span * FANOUT
    if active:
        if DW.dtype.element_ty == tl.float64:
            tl.store(DW + cols, acc, mask=mask)
        else:
            # Through float32: Triton's interpreter has no direct float64 -> bfloat16 cast (it
            # yields NaN); the extra rounding adds at most 2**-24 relative.
            tl.store(DW + cols, acc.to(tl.float32).to(DW.dtype.element_ty), mask=mask)


@triton.jit
def _dx(u, x, rstd, mean_ux):
    """dx of a row (or rows: ``rstd`` and ``mean_ux`` broadcast against ``u`` and ``x``)."""
    return (u - x * (rstd * rstd * mean_ux)) * rstd


@triton.jit
def _dw_term(dy, x, rstd, LLAMA: tl.constexpr, X_DTYPE: tl.constexpr, DW_ACC: tl.constexpr):
    """One row's (or rows') dweight term, in DW_ACC."""
    if LLAMA:
        # The weight multiplied the normalised value rounded to X's dtype: so does dw.
        xr = (x * rstd).to(X_DTYPE)
        return dy.to(DW_ACC) * xr.to(DW_ACC)
    else:
        # float32: for 16-bit inputs dy * x is exact, the product with rstd rounds once;
        # float64: every term is exact up to rstd's own rounding.
        return (dy.to(DW_ACC) * x.to(DW_ACC)) * rstd.to(DW_ACC)


@triton.jit
def _row_backward(
    DY,
    X,
    W,
    RSTD,
    MEAN_UX,
    DH,
    DY_B,
    DY_C,
    DX,
    DX2,
    row,
    cols,
    mask,
    stride_dy,
    stride_x,
    stride_dh,
    stride_w,
    stride_dy_b,
    stride_dy_c,
    N,
    offset,
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    DY_PARTS: tl.constexpr,
    DY_SUM: tl.constexpr,
    HAS_DX2: tl.constexpr,
    ACC: tl.constexpr,
    ONE_TILE: tl.constexpr,
):
    """dx of one row's ``cols`` (the whole row when ``ONE_TILE``, else one column tile after the
    row's ``mean(u*x)`` in MEAN_UX), stored to DX (and DX2); returns ``(dy, x, rstd)`` in ACC for
    the row's dweight term. Shared by the row kernels with one row per step."""
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(ACC)
    dy = _dy_sum(
        tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0),
        DY_B + row * stride_dy_b + cols,
        DY_C + row * stride_dy_c + cols,
        mask,
        DY_PARTS,
        DY_SUM,
        ACC,
    )
    rstd = tl.load(RSTD + row)
    if HAS_WEIGHT:
        # Re-read per row (an L1/L2 hit) instead of pinning BLOCK more registers.
        u = dy * (tl.load(W + cols * stride_w, mask=mask, other=0.0).to(ACC) + offset)
    else:
        u = dy
    if ONE_TILE:
        mean_ux = tl.sum(u * x, axis=0) / N
    else:
        mean_ux = tl.load(MEAN_UX + row)
    dx = _dx(u, x, rstd, mean_ux)
    if HAS_DH:
        dx += tl.load(DH + row * stride_dh + cols, mask=mask, other=0.0).to(ACC)
    tl.store(DX + row * N + cols, dx.to(DX.dtype.element_ty), mask=mask)
    if HAS_DX2:
        tl.store(DX2 + row * N + cols, dx.to(DX2.dtype.element_ty), mask=mask)
    return dy, x, rstd


@triton.jit
def _dweight_finish(
    dw,  # (BLOCK,) this program's partial over its rows, DW_ACC
    DW,
    DW_PARTIAL,
    COUNTERS,  # this column tile's counters
    pid,
    groups,
    N,
    cols,
    mask,
    TREE: tl.constexpr,
    FANOUT: tl.constexpr,
):
    """Partials meet in float64: the sum adds no visible error, whatever the number of groups.
    Either over the fixed tree now, or stored for the sum launch."""
    if TREE:
        _dweight_tree_finish(
            dw.to(tl.float64), DW, DW_PARTIAL, COUNTERS, pid, groups, N, cols, mask, FANOUT
        )
    else:
        # In DW_ACC (float32 rows: half the bytes of float64); the sum launch widens each
        # value exactly, so dweight's bits are those of float64 partials.
        tl.store(
            DW_PARTIAL + pid.to(tl.int64) * N + cols, dw.to(DW_PARTIAL.dtype.element_ty), mask=mask
        )

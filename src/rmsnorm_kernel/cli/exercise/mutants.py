"""Deliberately broken, tutorial-style RMSNorm kernels for the mutation-testing exercise.

These kernels copy the tutorial's three Triton kernels (forward, dx + partial, dweight column sum)
and plant one classic bug each, selected by the ``MUTATION`` constexpr (0 = the unmutated control).
They live here, apart from :mod:`rmsnorm_kernel.kernels`, so a broken variant can never be
imported by mistake as the real kernel.

==  ======================  =====================================================================
id  name                    planted bug
==  ======================  =====================================================================
1   forward-block-mean      forward divides the sum of squares by BLOCK instead of N
2   backward-block-mean     backward ``mean(u*x)`` divides by BLOCK instead of N
3   dweight-row-mean         dweight takes a mean over the M rows instead of a sum
4   missing-r3-term         dx drops ``- x * r**3 * mean(u*x)`` (only the direct term ``r*u``)
5   rows-by-block           rows are addressed with ``row * BLOCK`` instead of ``row * N``
6   no-fp32-upcast          the reductions run in the input dtype, upcast only afterwards
7   weight-not-in-u          backward uses ``u = dy`` instead of ``u = dy * weight``
8   padding-as-one          masked columns load as 1 instead of 0 in the forward
==  ======================  =====================================================================

The launchers give every row-addressed buffer ``M * BLOCK`` elements of room, so mutant 5 reads
and writes the *wrong rows* of an allocation instead of faulting outside it (on a GPU an
out-of-bounds store would corrupt unrelated memory or kill the CUDA context).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

import rmsnorm_kernel  # noqa: F401  (sets TRITON_INTERPRET before @triton.jit runs)


@dataclass(frozen=True)
class Mutant:
    id: int
    name: str
    bug: str
    why_hidden: str  # where this bug does NOT show, i.e. what a weak test suite would miss


MUTANTS: dict[int, Mutant] = {
    m.id: m
    for m in (
        Mutant(0, "control", "none: the tutorial's kernels as written", "-"),
        Mutant(
            1,
            "forward-block-mean",
            "forward: sum(x^2) / BLOCK instead of / N",
            "N a power of two (BLOCK == N), e.g. N=256",
        ),
        Mutant(
            2,
            "backward-block-mean",
            "backward: sum(u*x) / BLOCK instead of / N",
            "N a power of two; forward-only checks",
        ),
        Mutant(3, "dweight-row-mean", "dweight: mean over rows instead of sum", "M=1"),
        Mutant(
            4,
            "missing-r3-term",
            "dx = r*u (the - x*r^3*mean(u*x) term is missing)",
            "forward-only checks; dweight checks",
        ),
        Mutant(
            5,
            "rows-by-block",
            "rows addressed with row*BLOCK instead of row*N",
            "M=1, or N a power of two",
        ),
        Mutant(
            6,
            "no-fp32-upcast",
            "reductions in the input dtype, upcast after the sum",
            "float32 inputs; fp16 inputs of modest size (|x| < 256)",
        ),
        Mutant(
            7,
            "weight-not-in-u",
            "backward: u = dy instead of dy*weight",
            "weight = 1 everywhere; forward-only checks",
        ),
        Mutant(
            8,
            "padding-as-one",
            "forward: masked columns load as 1 instead of 0",
            "N a power of two (no masked columns)",
        ),
    )
}


@triton.jit
def mutant_forward_kernel(
    X,  # pointer to the input, rows of N values (M x BLOCK room)
    W,  # pointer to the weight (N,)
    Y,  # pointer to the output, same layout as X
    R,  # pointer to the saved inverse RMS, one float32 per row
    N: tl.constexpr,  # data width of a row
    EPS: tl.constexpr,  # epsilon added to mean(x^2)
    BLOCK: tl.constexpr,  # work width: next power of two >= N
    MUTATION: tl.constexpr,  # which bug to plant (0 = none)
):
    row = tl.program_id(0)
    column = tl.arange(0, BLOCK)
    mask = column < N
    if MUTATION == 5:
        start = row * BLOCK  # BUG 5: the row stride is the work width
    else:
        start = row * N
    if MUTATION == 8:
        x = tl.load(X + start + column, mask, other=1.0)  # BUG 8: padding counts as ones
    else:
        x = tl.load(X + start + column, mask, other=0.0)
    weight = tl.load(W + column, mask, other=0.0).to(tl.float32)
    if MUTATION == 6:
        sum_sq = tl.sum(x * x, 0).to(tl.float32)  # BUG 6: squares summed in the input dtype
    else:
        xf = x.to(tl.float32)
        sum_sq = tl.sum(xf * xf, 0)
    if MUTATION == 1:
        inverse = tl.rsqrt(sum_sq / BLOCK + EPS)  # BUG 1: the padding counts in the mean
    else:
        inverse = tl.rsqrt(sum_sq / N + EPS)
    y = x.to(tl.float32) * inverse * weight
    tl.store(Y + start + column, y, mask)
    tl.store(R + row, inverse)


@triton.jit
def mutant_dx_kernel(
    X,  # pointer to the input
    W,  # pointer to the weight
    DY,  # pointer to the upstream gradient, same layout as X
    R,  # pointer to the inverse RMS saved by the forward
    DX,  # pointer to the input gradient, same layout as X
    PARTIAL,  # pointer to the float32 dweight contributions, same layout as X
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    MUTATION: tl.constexpr,
):
    row = tl.program_id(0)
    column = tl.arange(0, BLOCK)
    mask = column < N
    if MUTATION == 5:
        start = row * BLOCK  # BUG 5
    else:
        start = row * N
    x = tl.load(X + start + column, mask, other=0.0)
    weight = tl.load(W + column, mask, other=0.0)
    dy = tl.load(DY + start + column, mask, other=0.0)
    inverse = tl.load(R + row)
    if MUTATION == 6:
        # BUG 6: u*x and its sum stay in the input dtype
        if MUTATION == 7:
            u_low = dy
        else:
            u_low = dy * weight
        sum_ux = tl.sum(u_low * x, 0).to(tl.float32)
    x = x.to(tl.float32)
    dy = dy.to(tl.float32)
    if MUTATION == 7:
        u = dy  # BUG 7: weight forgotten
    else:
        u = dy * weight.to(tl.float32)
    if MUTATION != 6:
        sum_ux = tl.sum(u * x, 0)
    if MUTATION == 2:
        mean_ux = sum_ux / BLOCK  # BUG 2: backward mean over the padding too
    else:
        mean_ux = sum_ux / N
    if MUTATION == 4:
        dx = inverse * u  # BUG 4: the r^3 term is missing
    else:
        dx = inverse * u - x * inverse * inverse * inverse * mean_ux
    tl.store(DX + start + column, dx, mask)
    tl.store(PARTIAL + start + column, dy * x * inverse, mask)


@triton.jit
def mutant_weight_sum_kernel(
    PARTIAL,  # pointer to the float32 contributions, M rows
    DWEIGHT,  # pointer to the output (N,)
    M,  # number of rows
    N: tl.constexpr,
    ROW_STRIDE: tl.constexpr,  # N (or BLOCK for mutant 5, consistent with the dx kernel)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MUTATION: tl.constexpr,
):
    pid = tl.program_id(0)
    column = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (column[None, :] < N)
        block = tl.load(PARTIAL + rows[:, None] * ROW_STRIDE + column[None, :], mask, other=0.0)
        acc += tl.sum(block, 0)
    if MUTATION == 3:
        acc = acc / M  # BUG 3: a mean over rows instead of the sum
    tl.store(DWEIGHT + column, acc, column < N)


def _roomy(t: torch.Tensor, block: int) -> torch.Tensor:
    """Copy a 2-D tensor into a flat buffer with ``M * BLOCK`` elements of room (see module doc)."""
    m, n = t.shape
    buffer = torch.zeros(max(m * block, m * n, 1), dtype=t.dtype, device=t.device)
    buffer[: m * n] = t.reshape(-1)
    return buffer


def mutant_forward(x, weight, eps, mutation):
    m, n = x.shape
    block = triton.next_power_of_2(n)
    x_buf = _roomy(x.contiguous(), block)
    y_buf = torch.zeros_like(x_buf)
    inverse = torch.empty(m, device=x.device, dtype=torch.float32)
    mutant_forward_kernel[(m,)](x_buf, weight.contiguous(), y_buf, inverse, n, eps, block, mutation)
    return y_buf[: m * n].view(m, n), inverse


def mutant_backward(x, weight, dy, inverse, mutation):
    m, n = x.shape
    block = triton.next_power_of_2(n)
    x_buf = _roomy(x.contiguous(), block)
    dy_buf = _roomy(dy.contiguous(), block)
    dx_buf = torch.zeros_like(x_buf)
    partial = torch.zeros(x_buf.numel(), device=x.device, dtype=torch.float32)
    mutant_dx_kernel[(m,)](
        x_buf, weight.contiguous(), dy_buf, inverse, dx_buf, partial, n, block, mutation
    )
    dweight = torch.empty(n, device=x.device, dtype=weight.dtype)
    row_stride = block if mutation == 5 else n
    mutant_weight_sum_kernel[(triton.cdiv(n, 32),)](
        partial, dweight, m, n, row_stride, 32, 32, mutation
    )
    return dx_buf[: m * n].view(m, n), dweight


class MutantRMSNormFunction(torch.autograd.Function):
    """The tutorial's autograd wiring around the (possibly) mutated kernels."""

    @staticmethod
    def forward(ctx, x, weight, eps, mutation):
        y, inverse = mutant_forward(x, weight, eps, mutation)
        ctx.save_for_backward(x, weight, inverse)
        ctx.mutation = mutation
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, inverse = ctx.saved_tensors
        dx, dweight = mutant_backward(x, weight, dy, inverse, ctx.mutation)
        return dx, dweight, None, None


def mutant_rmsnorm(mutation: int) -> Callable[..., torch.Tensor]:
    """An implementation with the campaign signature ``f(x, weight, eps, *, offset, residual)``.

    Tutorial contract only: 2-D ``x`` with a weight, no offset, no residual.
    """
    if mutation not in MUTANTS:
        raise ValueError(f"unknown mutation {mutation} (known: {sorted(MUTANTS)})")

    def impl(x, weight, eps=1e-6, *, offset=0.0, residual=None):
        if x.dim() != 2 or weight is None or offset != 0.0 or residual is not None:
            raise ValueError(
                "mutants follow the tutorial's contract: 2-D x, a weight, no offset, no residual"
            )
        return MutantRMSNormFunction.apply(x, weight, eps, mutation)

    impl.__name__ = f"mutant_{mutation}_{MUTANTS[mutation].name}"
    return impl

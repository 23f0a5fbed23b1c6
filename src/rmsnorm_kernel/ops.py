"""Python launchers: view rows, allocate outputs, pick block sizes / warps / grid, launch.

Public launchers take the user's tensors (``[..., N]``); the leading dims are flattened into rows
without a copy whenever the last dim is contiguous and the leading dims share one row stride.
"""

from __future__ import annotations

import functools
import struct

import torch
import triton

from . import kernels
from .backend import BACKEND
from .contract import ContractValueError, check_contract

#: Forward: widest row kept whole in registers (the issue asks for 65536 in one pass; Liger's
#: limit too). Wider rows are read in LOOP_BLOCK chunks, twice (the second read mostly hits L2).
MAX_FUSED_N = 65536
#: Chunk width for rows wider than MAX_FUSED_N: 8 values per thread at 32 warps, loads stay wide.
LOOP_BLOCK = 8192
#: Backward: widest row kept whole in one program. Measured on the H200 (tune.py, bf16, 1.5 GB
#: moved): one pass reaches 3.6 TB/s at 16384 columns (8 warps), while 65536 in one pass took
#: 1.5 ms for 1024 rows (spills), so wider rows take the column-tile path (~2.5 TB/s).
MAX_FUSED_N_BWD = 16384
#: Column tile for wider backward rows (after a separate mean(u*x) row reduction).
BWD_TILE = 4096
#: Warps of a column tile: 16 and 32 measured equal (645 us), 4 slower (727 us) at N >= 32768.
BWD_TILE_WARPS = 16
#: Backward persistent grid: programs per SM. Short rows need more programs in flight to keep
#: memory busy: on the H200 (tune.py --programs-per-sm, bf16, 1.5 GB moved) the best was 8 per SM
#: at 1024 columns (456 us vs 948 us with 2), 4 at 2048, and 2 from 4096 up, i.e. ~8192 / BLOCK.
#: The grid size fixes the order of dweight additions, so it depends on shapes only, never timing.
MIN_PROGRAMS_PER_SM = 2
MAX_PROGRAMS_PER_SM = 8
#: Programs in the interpreter (no SMs there): small, so CPU tests still cover several partials.
INTERPRETER_PROGRAMS = 4
#: Budget for the dweight partials (programs x N x ACC bytes): the seed's 64 MiB, now independent
#: of M because the grid is persistent.
DW_SCRATCH_BYTES = 64 << 20
#: dweight column sum: a BLOCK_G x BLOCK_N tile per step (32 x 128 fp32 = 16 KiB in registers).
SUM_BLOCK_G = 32
SUM_BLOCK_N = 128

#: Inputs copied because their layout could not be read in place (see ``as_rows``).
COPIES = {"x": 0, "residual": 0, "dy": 0}


@functools.lru_cache(maxsize=64)
def split_float(value: float) -> tuple[float, float]:
    """``value`` as float32 ``hi + lo``: Triton passes Python floats to kernels as float32, and the
    float64 path needs eps and offset to ~1e-16 (one float32 alone is off by up to 3e-8)."""
    hi = struct.unpack("f", struct.pack("f", value))[0]
    return hi, value - hi


def _acc_dtype(out_dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if out_dtype == torch.float64 else torch.float32


_TL_DTYPES = {torch.float32: triton.language.float32, torch.float64: triton.language.float64}


def _block(n: int) -> tuple[int, bool]:
    """``(BLOCK, ONE_PASS)`` for a row of ``n`` values."""
    if n <= MAX_FUSED_N:
        return triton.next_power_of_2(n), True
    return LOOP_BLOCK, False


def _num_warps(block: int) -> int:
    # One warp per 1024 values up to 32 warps keeps ~32 values per thread per live vector.
    if block >= 32768:
        return 32
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4


def _bwd_num_warps(block: int) -> int:
    # The one-pass backward keeps x, dy and the dweight partial live: ~64 values per thread per
    # vector was fastest on the H200 (8192 columns: 4 warps 438 us, 16 warps 519 us).
    return max(4, min(32, block // 2048))


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _row_groups(
    m: int, n: int, block: int, tiles: int, device: torch.device, acc_bytes: int
) -> int:
    """Row groups of the persistent backward grid (``groups x tiles`` programs in all)."""
    if BACKEND == "interpreter" or device.type != "cuda":
        programs = INTERPRETER_PROGRAMS
    else:
        index = device.index if device.index is not None else torch.cuda.current_device()
        per_sm = max(MIN_PROGRAMS_PER_SM, min(MAX_PROGRAMS_PER_SM, 8192 // block))
        programs = _sm_count(index) * per_sm
    budget = max(1, DW_SCRATCH_BYTES // (n * acc_bytes))
    return max(1, min(m, programs // tiles, budget))


def as_rows(t: torch.Tensor, name: str) -> torch.Tensor:
    """``[..., N] -> (M, N)`` with unit column stride, in place when possible.

    A copy happens only when the last dim is strided or the leading dims cannot share one row
    stride; it is counted in ``COPIES[name]``.
    """
    n = t.shape[-1]
    if t.dim() == 2 and (t.stride(1) == 1 or n == 1):  # the hot path: already rows
        return t
    try:
        rows = t.view(-1, n)
    except RuntimeError:
        rows = None
    if rows is None or (n > 1 and rows.stride(1) != 1):
        COPIES[name] += 1
        rows = t.contiguous().view(-1, n)
    return rows


def launch_forward(
    x2: torch.Tensor,
    weight: torch.Tensor | None,
    residual2: torch.Tensor | None,
    eps: float,
    offset: float,
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Rows in, ``(y (M, N) out_dtype, h (M, N) x.dtype or None, rstd (M,) ACC)`` out."""
    m, n = x2.shape
    acc = _acc_dtype(out_dtype)
    y = torch.empty((m, n), device=x2.device, dtype=out_dtype)
    h = None if residual2 is None else torch.empty((m, n), device=x2.device, dtype=x2.dtype)
    rstd = torch.empty((m,), device=x2.device, dtype=acc)
    if m == 0:
        return y, h, rstd
    block, one_pass = _block(n)
    kernels.rmsnorm_forward_kernel[(m,)](
        x2,
        residual2 if residual2 is not None else x2,
        weight if weight is not None else x2,
        y,
        h if h is not None else y,
        rstd,
        x2.stride(0),
        residual2.stride(0) if residual2 is not None else 0,
        n,
        *split_float(float(eps)),
        *split_float(float(offset)),
        HAS_WEIGHT=weight is not None,
        HAS_RESIDUAL=residual2 is not None,
        ACC=_TL_DTYPES[acc],
        BLOCK=block,
        ONE_PASS=one_pass,
        num_warps=_num_warps(block),
    )
    return y, h, rstd


def launch_backward(
    dy2: torch.Tensor,
    x2: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    dh2: torch.Tensor | None,
    dx_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows in, ``(dx (M, N) dx_dtype, dweight (N,) weight.dtype or None)`` out."""
    m, n = x2.shape
    acc = rstd.dtype
    dx = torch.empty((m, n), device=x2.device, dtype=dx_dtype)
    if m == 0:
        dw = None if weight is None else torch.zeros_like(weight)
        return dx, dw
    one_tile = n <= MAX_FUSED_N_BWD
    block = triton.next_power_of_2(n) if one_tile else BWD_TILE
    tiles = triton.cdiv(n, block)
    mean_ux = rstd  # placeholder pointer when the row reduction happens in the tile kernel
    if not one_tile:
        mean_ux = torch.empty_like(rstd)
        kernels.rmsnorm_row_dot_kernel[(m,)](
            dy2,
            x2,
            weight if weight is not None else x2,
            mean_ux,
            dy2.stride(0),
            x2.stride(0),
            n,
            *split_float(float(offset)),
            HAS_WEIGHT=weight is not None,
            ACC=_TL_DTYPES[acc],
            BLOCK=LOOP_BLOCK,
            num_warps=_num_warps(LOOP_BLOCK),
        )
    groups = _row_groups(m, n, block, tiles, x2.device, acc.itemsize)
    rows_per_program = triton.cdiv(m, groups)
    groups = triton.cdiv(m, rows_per_program)  # no program without rows
    partial = rstd  # placeholder pointer without a weight
    if weight is not None:
        partial = torch.empty((groups, n), device=x2.device, dtype=acc)
    kernels.rmsnorm_backward_kernel[(groups, tiles)](
        dy2,
        x2,
        weight if weight is not None else x2,
        rstd,
        mean_ux,
        dh2 if dh2 is not None else dy2,
        dx,
        partial,
        dy2.stride(0),
        x2.stride(0),
        dh2.stride(0) if dh2 is not None else 0,
        m,
        n,
        *split_float(float(offset)),
        rows_per_program,
        HAS_WEIGHT=weight is not None,
        HAS_DH=dh2 is not None,
        ACC=_TL_DTYPES[acc],
        BLOCK=block,
        ONE_TILE=one_tile,
        num_warps=_bwd_num_warps(block) if one_tile else BWD_TILE_WARPS,
    )
    if weight is None:
        return dx, None
    return dx, reduce_dweight(partial, weight.dtype)


def reduce_dweight(partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(G, N)`` partials -> ``(N,)`` column sums in ``dtype``, summed in a fixed order."""
    g, n = partial.shape
    dw = torch.empty((n,), device=partial.device, dtype=dtype)
    kernels.dweight_sum_kernel[(triton.cdiv(n, SUM_BLOCK_N),)](
        partial,
        dw,
        g,
        n,
        ACC=_TL_DTYPES[partial.dtype],
        BLOCK_G=SUM_BLOCK_G,
        BLOCK_N=SUM_BLOCK_N,
        num_warps=4,
    )
    return dw


def output_dtype(x: torch.Tensor, weight: torch.Tensor | None) -> torch.dtype:
    """``F.rms_norm``'s rule (torch 2.11-2.13): ``x.dtype``, whatever the weight's dtype.

    The weight is read in its own dtype and upcast; only the result is rounded to ``x.dtype``.
    """
    return x.dtype


def forward_op(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's launcher: ``x [..., N]`` -> ``(y [..., N], rstd [M])``, contract checked first."""
    check_contract(x, weight, eps)
    y, _, rstd = launch_forward(as_rows(x, "x"), weight, None, eps, 0.0, output_dtype(x, weight))
    return y.view(x.shape), rstd


def backward_op(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The seed's backward launcher: ``(dx [..., N], dweight [N] or None)``."""
    check_contract(x, weight)
    if dy.shape != x.shape or dy.device != x.device:
        raise ContractValueError(
            f"dy must match x's shape {tuple(x.shape)} and device {x.device} "
            f"(got {tuple(dy.shape)} on {dy.device})"
        )
    m = x.numel() // x.shape[-1]
    if rstd.shape != (m,) or rstd.dtype != _acc_dtype(output_dtype(x, weight)):
        raise ContractValueError(
            f"rstd must be forward_op's (M,) = ({m},) inverse RMS (got {rstd.shape})"
        )
    dx, dw = launch_backward(as_rows(dy, "dy"), as_rows(x, "x"), weight, rstd, 0.0, None, x.dtype)
    return dx.view(x.shape), dw

"""Python launchers: view rows, allocate outputs, pick block sizes / warps / grid, launch.

Launchers take rows: ``(M, N)`` tensors, or any contiguous ``[..., N]`` with its row stride (no
view: views cost microseconds of host time); leading dims are flattened without a copy whenever
the last dim is contiguous and they share one row stride. Every launch goes through
:class:`launch.CachedKernel` (the compiled handle, after the first launch of a specialisation).
Each heuristic constant below says what was measured to choose it.
"""

from __future__ import annotations

import functools
import struct

import torch
import triton
import triton.language as tl

from . import kernels
from .backend import BACKEND
from .contract import ContractValueError, check_contract
from .launch import CachedKernel

#: Forward: widest row kept whole in registers. Measured on the H200 (kernel_perf/tune.py, bf16,
#: 64M elements): one pass at 32768 columns 77.9 us vs 79.0 us chunked; at 65536 one pass 99.7 us
#: vs 97.3 us in chunks of 16384, so wider rows are read in chunks, twice (the second read mostly
#: hits L2).
MAX_FUSED_N = 32768
#: Chunk width of wider forward rows, at LOOP_WARPS: 16384 x 32 warps was fastest or equal at
#: 65536-262144 columns (97.3 / 108.4 / 108.3 us; 4096 x 8 warps: 123.8 / 120.4 / 162.2 us).
LOOP_BLOCK = 16384
LOOP_WARPS = 32
#: Chunk of the wide-row backward reduction mean(u*x) (rmsnorm_row_dot_kernel) and its warps.
ROW_DOT_BLOCK = 8192
ROW_DOT_WARPS = 16
#: Forward rows this short run several rows per program (rmsnorm_forward_rows_kernel): one row
#: per program reached 834 GB/s at 128 columns and 1632 GB/s at 256 (bf16, 64M elements), several
#: rows 3.7-3.8 TB/s.
ROWS_MAX_N = 1024
#: Values per program in the several-rows kernel (ROWS * BLOCK): 4096 was fastest or within 2%
#: from 128 to 1024 columns, with 8 warps up to 256 columns and 4 warps above (70.6, 70.0, 72.2,
#: 71.4 us at 128, 256, 512, 1024 columns).
ROWS_TILE = 4096
#: Backward: widest row kept whole in one program. Measured on the H200 (tune.py, bf16, 1.5 GB
#: moved): one pass reaches 3.6 TB/s at 16384 columns (8 warps), while 65536 in one pass took
#: 1.5 ms for 1024 rows (spills), so wider rows take the column-tile path (~2.5 TB/s).
MAX_FUSED_N_BWD = 16384
#: Column tile for wider backward rows (after a separate mean(u*x) row reduction).
BWD_TILE = 4096
#: Warps of a column tile: 16 and 32 measured equal (645 us), 4 slower (727 us) at N >= 32768.
BWD_TILE_WARPS = 16
#: Software pipelining of the backward row loop (tl.range num_stages). On the H200 2 stages were
#: slower than none (bf16, 64M elements: 8192 columns 159.5 vs 135.8 us, 16384: 198.4 vs 154.9),
#: so loads are not pipelined; latency is hidden by programs in flight instead.
BWD_STAGES = 1
#: Backward persistent grid: programs per SM, by row block. Short rows need more programs in
#: flight to keep memory busy: on the H200 (bf16, ~1.5 GB moved, the previous kernel) 8 per SM at
#: 1024 columns took 456 us vs 948 us with 2, and 4 was best at 2048. For the current kernel
#: (kernel_perf/tune.py, bf16, 64M elements): 3 at 4096 columns (8 warps) 130.2 us vs 141.1 with
#: 2; 1 at 8192 (16 warps) 144.1 vs 149.0 with 2; 1 at 16384 (16 warps) 135.3 vs 147.1 with 2.
#: The grid size fixes the order of dweight additions, so it depends on shapes only, never timing.
PROGRAMS_PER_SM = {1024: 8, 2048: 4, 4096: 3}  # wider blocks: 1; narrower: 8
MIN_PROGRAMS_PER_SM = 1
MAX_PROGRAMS_PER_SM = 8
#: Programs in the interpreter (no SMs there): small, so CPU tests still cover several partials
#: and an odd-sized dweight tree (a node without a sibling).
INTERPRETER_PROGRAMS = 5
#: Budget for the dweight partials (programs x N x DW_ACC bytes): the tutorial's 64 MiB, independent
#: of M because the grid is persistent.
DW_SCRATCH_BYTES = 64 << 20
#: dweight accumulation over one program's rows in float64 for every size. Off: float64 costs
#: ~1.5x the registers of the row loop (compile_check.py, 4096 columns at 8 warps: 126 vs 80),
#: i.e. occupancy on large tensors. Small ones (M * N <= TREE_MAX_ELEMS, latency-bound, where a
#: program often owns one row) accumulate in float64 anyway, so each term is exact up to rstd's
#: rounding; everywhere the partials meet in float64.
DW_FLOAT64 = False

#: dweight finish: in the backward launch over a fixed tree (one launch: less host time, and no
#: launch gap) up to this many elements (M * N), or for rows up to TREE_ALWAYS_N wide; otherwise a
#: second launch sums the partials (dweight_sum_kernel). The tree's last program climbs
#: ~log2(programs) levels one after another (an atomic and an L2 round trip each), each level
#: moving N partials: on the H200 (bf16, 64M elements) the tree took 135.8 us at 1024 columns vs
#: 157.7 us with the sum launch, but 159.5 vs 141.2 at 4096 and 194.1 vs 148.9 at 8192.
TREE_MAX_ELEMS = 1 << 22
TREE_ALWAYS_N = 1024
#: dweight_sum_kernel tile: BLOCK_G x BLOCK_N float64 partials per step (32 x 128 = 32 KiB).
SUM_BLOCK_G = 32
SUM_BLOCK_N = 128

#: Inputs copied because their layout could not be read in place (see ``as_rows`` and
#: ``weight_of``).
COPIES = {"x": 0, "residual": 0, "dy": 0, "weight": 0}
#: Weights are read with their own stride while every offset ``(N - 1) * stride`` fits in int32
#: (the kernels' column offsets are int32); a wider spread is copied once (``COPIES["weight"]``).
_INT32_MAX = 2**31 - 1

FORWARD = CachedKernel(kernels.rmsnorm_forward_kernel)
FORWARD_ROWS = CachedKernel(kernels.rmsnorm_forward_rows_kernel)
ROW_DOT = CachedKernel(kernels.rmsnorm_row_dot_kernel)
BACKWARD = CachedKernel(kernels.rmsnorm_backward_kernel)
DW_SUM = CachedKernel(kernels.dweight_sum_kernel)


@functools.lru_cache(maxsize=64)
def split_float(value: float) -> tuple[float, float]:
    """``value`` as float32 ``hi + lo``: Triton passes Python floats to kernels as float32, and the
    float64 path needs eps and offset to ~1e-16 (one float32 alone is off by up to 3e-8)."""
    hi = struct.unpack("f", struct.pack("f", value))[0]
    return hi, value - hi


def _acc_dtype(x_dtype: torch.dtype) -> torch.dtype:
    """The kernels' math: float64 for float64 ``x``, float32 otherwise."""
    return torch.float64 if x_dtype == torch.float64 else torch.float32


def weight_of(weight: torch.Tensor | None) -> tuple[torch.Tensor | None, int]:
    """``(weight, stride)`` as the kernels read it: in place with its own stride (a step slice, a
    matrix column, ``expand``'s stride 0), or a counted copy when its offsets overflow int32."""
    if weight is None:
        return None, 1
    stride = weight.stride(0)
    if stride == 1 or weight.shape[0] == 1:
        return weight, 1
    if stride * (weight.shape[0] - 1) > _INT32_MAX:
        COPIES["weight"] += 1
        return weight.contiguous(), 1
    return weight, stride


_TL_DTYPES = {torch.float32: tl.float32, torch.float64: tl.float64}


def _num_warps(block: int) -> int:
    """Warps of the one-row forward kernel. On the H200 (bf16, 64M elements) 4 warps were fastest
    or equal up to 8192 columns (2048: 70.5 us vs 74.2 with 8), 8 at 16384 (72.8 vs 74.6 with 16,
    79.5 with 4), 32 at 32768 (77.9 vs 78.4 with 16)."""
    if block >= 32768:
        return 32
    if block >= 16384:
        return 8
    return 4


@functools.lru_cache(maxsize=256)
def _fwd_config(n: int) -> tuple[bool, int, int | bool, int]:
    """``(rows_kernel, BLOCK, ROWS or ONE_PASS, num_warps)`` for rows of ``n`` values."""
    if n <= ROWS_MAX_N:
        block = triton.next_power_of_2(n)
        rows = max(1, ROWS_TILE // block)
        return True, block, rows, 8 if block <= 256 else 4
    if n <= MAX_FUSED_N:
        block = triton.next_power_of_2(n)
        return False, block, True, _num_warps(block)
    return False, LOOP_BLOCK, False, LOOP_WARPS


@functools.lru_cache(maxsize=256)
def _fwd_rows(m: int, rows: int, warps: int, device_index: int | None) -> tuple[int, int]:
    """``(ROWS, num_warps)`` for ``m`` short rows: fewer rows per program while the grid would
    leave SMs idle (128 x 257 in 16 programs of 8 rows took 2.1 us, one row per program 1.6)."""
    if device_index is not None:
        programs = 2 * _sm_count(device_index)
        while rows > 1 and -(-m // rows) < programs:
            rows //= 2
            warps = 4
    return rows, warps


def _bwd_num_warps(block: int) -> int:
    """Warps of the one-tile backward: about 32 values per thread per live vector keeps the row
    loop near 100 registers without spills (compile_check.py, sm_90, float32 accumulation: 4096
    columns 148 registers at 4 warps, 80 at 8; 8192: 173 at 8, 107 at 16; 16384: 8 warps spill
    72 bytes, 16 warps 64 bytes at 128 registers)."""
    return max(4, min(16, block // 512))


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=256)
def _bwd_config(m: int, n: int, device_index: int | None):
    """``(BLOCK, ONE_TILE, tiles, groups, rows_per_program, num_warps)`` of the backward grid."""
    one_tile = n <= MAX_FUSED_N_BWD
    block = triton.next_power_of_2(n) if one_tile else BWD_TILE
    tiles = triton.cdiv(n, block)
    if device_index is None:
        groups = INTERPRETER_PROGRAMS  # per column tile, so CPU tests cover tiles x a tree
    else:
        per_sm = PROGRAMS_PER_SM.get(block, 8 if block < 1024 else 1)
        per_sm = max(MIN_PROGRAMS_PER_SM, min(MAX_PROGRAMS_PER_SM, per_sm))
        groups = _sm_count(device_index) * per_sm // tiles
    budget = max(1, DW_SCRATCH_BYTES // (n * 8))  # float64 partials
    groups = max(1, min(m, groups, budget))
    rows_per_program = triton.cdiv(m, groups)
    groups = triton.cdiv(m, rows_per_program)  # no program without rows
    warps = _bwd_num_warps(block) if one_tile else BWD_TILE_WARPS
    return block, one_tile, tiles, groups, rows_per_program, warps


def _device_index(t: torch.Tensor) -> int | None:
    """The CUDA device index of ``t``, or None where kernels run in the interpreter."""
    if BACKEND == "interpreter":
        return None
    index = t.get_device()
    return index if index >= 0 else None


#: Tree counters per (device, stream), kept at zero between launches (the kernel resets them).
_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}


def tree_counters(device: torch.device, index: int | None, size: int) -> torch.Tensor:
    """``size`` int32 zeros for the dweight tree of one backward launch.

    Launches on one stream run one after another and each leaves its counters at zero, so one
    buffer per (device, stream) serves them all without a memset. Under CUDA-graph capture each
    launch gets its own zeros (a memset node in the graph, replayed before the kernel), so graphs
    never share counters with each other or with eager calls.
    """
    if index is None or torch.cuda.is_current_stream_capturing():
        return torch.zeros(size, device=device, dtype=torch.int32)
    key = (index, torch._C._cuda_getCurrentRawStream(index))
    counters = _COUNTERS.get(key)
    if counters is None or counters.numel() < size:
        counters = torch.zeros(max(size, 4096), device=device, dtype=torch.int32)
        _COUNTERS[key] = counters
    return counters


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


def rows_of(t: torch.Tensor, name: str) -> tuple[torch.Tensor, int]:
    """``(tensor, row stride)``: the rows of ``t [..., N]`` as the kernels read them.

    A contiguous tensor of any shape is its own rows (row stride N; no view, which costs several
    microseconds of host time); otherwise :func:`as_rows` (a view, or a counted copy).
    """
    if t.is_contiguous():
        return t, t.shape[-1]
    rows = as_rows(t, name)
    return rows, rows.stride(0)


def _empty_out(like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous tensor of ``like``'s shape (``empty_like`` is the cheapest allocation)."""
    if dtype == like.dtype:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    return torch.empty(like.shape, device=like.device, dtype=dtype)


def launch_forward(
    x2: torch.Tensor,
    weight: torch.Tensor | None,
    residual2: torch.Tensor | None,
    eps: float,
    offset: float,
    out_dtype: torch.dtype,
    *,
    stride_x: int | None = None,
    stride_res: int | None = None,
    llama: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Rows in: ``(y, h or None, rstd (M,) ACC)`` out; ``y`` (``out_dtype``) and ``h``
    (``x2.dtype``) are contiguous with ``x2``'s shape.

    ``x2``: ``(M, N)`` with unit column stride, or any ``[..., N]`` whose rows are ``stride_x``
    elements apart (a contiguous tensor: ``stride_x = N``); the same for ``residual2``.
    ``weight``: ``(N,)`` with any stride. ``llama``: round ``x * r`` to ``x2.dtype`` before the
    weight (see :func:`output_dtype`).
    """
    n = x2.shape[-1]
    m = x2.numel() // n
    sx = x2.stride(0) if stride_x is None else stride_x
    acc = _acc_dtype(x2.dtype)
    y = _empty_out(x2, out_dtype)
    h = None if residual2 is None else _empty_out(x2, x2.dtype)
    rstd = torch.empty((m,), device=x2.device, dtype=acc)
    if m == 0:
        return y, h, rstd
    rows_kernel, block, rows_or_one_pass, warps = _fwd_config(n)
    index = _device_index(x2)
    if rows_kernel:
        rows_or_one_pass, warps = _fwd_rows(m, rows_or_one_pass, warps, index)
    floats = (*split_float(eps), *split_float(offset))
    weight, sw = weight_of(weight)
    has_w, has_r = weight is not None, residual2 is not None
    w = weight if has_w else x2
    if has_r:
        r, sr = residual2, (residual2.stride(0) if stride_res is None else stride_res)
    else:
        r, sr = x2, 0
    consts = (has_w, has_r, llama, _TL_DTYPES[acc], block, rows_or_one_pass)
    if rows_kernel:
        FORWARD_ROWS.launch(
            (-(-m // rows_or_one_pass),),  # ceil division (triton.cdiv is slow to call)
            (x2, r, w, y, h if has_r else y, rstd, sx, sr, sw, m, n),
            floats,
            consts,
            warps,
            1,
            index,
            (x2, r, w, out_dtype, sx, sr, sw, m, n),  # y, h, rstd: fresh, dtypes given
        )
    else:
        FORWARD.launch(
            (m,),
            (x2, r, w, y, h if has_r else y, rstd, sx, sr, sw, n),
            floats,
            consts,
            warps,
            1,
            index,
            (x2, r, w, out_dtype, sx, sr, sw, n),  # y, h, rstd: fresh, dtypes given
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
    *,
    stride_dy: int | None = None,
    stride_x: int | None = None,
    stride_dh: int | None = None,
    llama: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows in: ``(dx, dweight (N,) weight.dtype or None)`` out; ``dx`` (``dx_dtype``) is
    contiguous with ``dy2``'s shape. Rows and strides as in :func:`launch_forward`; ``llama``
    as the forward's (dweight sums ``dy`` times ``x * r`` rounded to ``x2.dtype``)."""
    n = x2.shape[-1]
    m = rstd.numel()
    dx = _empty_out(dy2, dx_dtype)
    weight_in = weight
    weight, sw = weight_of(weight)
    has_w = weight is not None
    if m == 0:
        return dx, (
            torch.zeros(weight_in.shape, device=dx.device, dtype=weight_in.dtype) if has_w else None
        )
    sdy = dy2.stride(0) if stride_dy is None else stride_dy
    sx = x2.stride(0) if stride_x is None else stride_x
    acc = rstd.dtype
    tree = m * n <= TREE_MAX_ELEMS or n <= TREE_ALWAYS_N
    dw_acc = torch.float64 if DW_FLOAT64 or tree or acc == torch.float64 else torch.float32
    index = _device_index(x2)
    block, one_tile, tiles, groups, rows_per_program, warps = _bwd_config(m, n, index)
    offsets = split_float(offset)
    w = weight if has_w else x2
    mean_ux = rstd  # placeholder pointer when the row reduction happens in the tile kernel
    if not one_tile:
        mean_ux = torch.empty_like(rstd)
        ROW_DOT.launch(
            (m,),
            (dy2, x2, w, mean_ux, sdy, sx, sw, n),
            offsets,
            (has_w, _TL_DTYPES[acc], ROW_DOT_BLOCK),
            ROW_DOT_WARPS,
            1,
            index,
            (dy2, x2, w, sdy, sx, sw, n),  # mean_ux: fresh
        )
    dw = partial = counters = rstd  # placeholder pointers without a weight (or tree)
    if has_w:
        device = x2.device
        dw = torch.empty((n,), device=device, dtype=weight.dtype)
        partial = torch.empty((groups, n), device=device, dtype=torch.float64)
        if tree:
            counters = tree_counters(device, index, tiles * groups)
    if dh2 is not None:
        dh, sdh = dh2, (dh2.stride(0) if stride_dh is None else stride_dh)
    else:
        dh, sdh = dy2, 0
    BACKWARD.launch(
        (groups, tiles),
        (dy2, x2, w, rstd, mean_ux, dh, dx, dw, partial, counters, sdy, sx, sdh, sw, m, n)
        + (rows_per_program,),
        offsets,
        (has_w, dh2 is not None, llama, _TL_DTYPES[acc], _TL_DTYPES[dw_acc], block, one_tile)
        + (BWD_STAGES, tree),
        warps,
        1,
        index,
        # dx, dw, partial, counters: fresh (or cached zeros) with given dtypes, or placeholders
        # (rstd, dy2); mean_ux is rstd or fresh
        (dy2, x2, w, rstd, dh, dx_dtype, sdy, sx, sdh, sw, m, n, rows_per_program),
    )
    if has_w and not tree:
        DW_SUM.launch(
            (-(-n // SUM_BLOCK_N),),
            (partial, dw, groups, n),
            (),
            (SUM_BLOCK_G, SUM_BLOCK_N),
            4,
            1,
            index,
            (dw.dtype, groups, n),  # partial, dw: fresh
        )
    return dx, (dw if has_w else None)


def output_dtype(x: torch.Tensor, weight: torch.Tensor | None, llama: bool = False) -> torch.dtype:
    """The output dtype of each rounding rule.

    - default, ``F.rms_norm``'s rule (torch 2.11-2.13): ``x.dtype`` whatever the weight's dtype;
      the weight is read in its own dtype and upcast, only the result is rounded to ``x.dtype``.
    - ``llama`` (Hugging Face's ``LlamaRMSNorm``): ``x * r`` is rounded to ``x.dtype``, then
      multiplied by the weight in ``torch.promote_types(weight.dtype, x.dtype)``, the output dtype.
    """
    if llama and weight is not None:
        return torch.promote_types(weight.dtype, x.dtype)
    return x.dtype


def forward_op(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward launcher: ``x [..., N]`` -> ``(y [..., N], rstd [M])``, contract checked first."""
    check_contract(x, weight, eps)
    x2 = as_rows(x, "x")
    y, _, rstd = launch_forward(x2, weight, None, float(eps), 0.0, output_dtype(x, weight))
    return y.view(x.shape), rstd


def backward_op(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The tutorial's backward launcher: ``(dx [..., N], dweight [N] or None)``."""
    check_contract(x, weight)
    if dy.shape != x.shape or dy.device != x.device:
        raise ContractValueError(
            f"dy must match x's shape {tuple(x.shape)} and device {x.device} "
            f"(got {tuple(dy.shape)} on {dy.device})"
        )
    m = x.numel() // x.shape[-1]
    if rstd.shape != (m,) or rstd.dtype != _acc_dtype(x.dtype):
        raise ContractValueError(
            f"rstd must be forward_op's (M,) = ({m},) inverse RMS (got {rstd.shape})"
        )
    dx, dw = launch_backward(as_rows(dy, "dy"), as_rows(x, "x"), weight, rstd, 0.0, None, x.dtype)
    return dx.view(x.shape), dw

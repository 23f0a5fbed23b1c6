"""Python launchers: view rows, allocate outputs, take a launch config, launch.

Launchers take rows: ``(M, N)`` tensors, or any contiguous ``[..., N]`` with its row stride (no
view: views cost microseconds of host time); leading dims are flattened without a copy whenever
the last dim is contiguous and they share one row stride. The geometry of each launch is a frozen
config (:mod:`.config`): the heuristic's, or one passed explicitly. Every launch goes through
:class:`launch.CachedKernel` (the compiled handle, after the first launch of a specialisation).
"""

from __future__ import annotations

import functools
import logging
import struct

import torch
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from . import kernels
from .backend import BACKEND
from .config import (
    INTERPRETER_SUM_BLOCK_N,
    ROW_DOT_BLOCK,
    ROW_DOT_WARPS,
    SUM_BLOCK_G,
    SUM_BLOCK_N,
    TMA_CHUNK,
    TMA_PIPELINED_MIN_BYTES,
    BackwardConfig,
    ForwardConfig,
    backward_config,
    cap_split_grid,
    check_backward_cluster,
    check_forward_cluster,
    check_forward_split,
    check_forward_stages,
    check_pdl,
    check_split_tasks,
    forward_config,
    hopper,
    split_grid,
    stores_rstd,
    tma_from,
)
from .contract import ContractValueError, check_contract
from .launch import _DATA_PTR, COPY_COW_INPUTS, CachedKernel, readable, uncow

#: Inputs copied because their layout could not be read in place (see ``as_rows`` and
#: ``weight_of``).
COPIES = {"x": 0, "residual": 0, "dy": 0, "weight": 0}
#: Weights are read with their own stride while every offset ``(N - 1) * stride`` fits in int32
#: (the kernels' column offsets are int32); a wider spread is copied once (``COPIES["weight"]``).
_INT32_MAX = 2**31 - 1

log = logging.getLogger("rmsnorm_kernel")
FORWARD = CachedKernel(kernels.rmsnorm_forward_kernel)
FORWARD_ROWS = CachedKernel(kernels.rmsnorm_forward_rows_kernel)
#: Launched as clusters of ForwardConfig.cluster CTAs, compiled for one (see CachedKernel).
FORWARD_CLUSTER = CachedKernel(kernels.rmsnorm_forward_cluster_kernel, cluster=True)
#: ForwardConfig.maxnreg -> the cluster kernel compiled under that register cap (one table of
#: handles a cap: the cap is a compile option, not part of a launch's key).
FORWARD_CLUSTER_CAPPED: dict[int, CachedKernel] = {}
#: Cooperative: the programs of a row wait for each other (ForwardConfig.split).
FORWARD_SPLIT = CachedKernel(kernels.rmsnorm_forward_split_kernel, cooperative=True)
FORWARD_SPLIT_STAGED = CachedKernel(kernels.rmsnorm_forward_split_staged_kernel, cooperative=True)
ROW_DOT = CachedKernel(kernels.rmsnorm_row_dot_kernel)
BACKWARD = CachedKernel(kernels.rmsnorm_backward_kernel)
BACKWARD_ROWS = CachedKernel(kernels.rmsnorm_backward_rows_kernel)
BACKWARD_TMA = CachedKernel(kernels.rmsnorm_backward_tma_kernel)
BACKWARD_COLUMNS = CachedKernel(kernels.rmsnorm_backward_columns_kernel)
#: Launched as clusters of BackwardConfig.cluster CTAs, compiled for one (see CachedKernel).
BACKWARD_CLUSTER = CachedKernel(kernels.rmsnorm_backward_cluster_kernel, cluster=True)
DW_SUM = CachedKernel(kernels.dweight_sum_kernel)
#: What a tensor descriptor can move: 16-bit and float32 values (float64 rows keep pointers).
_TMA_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


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
    if weight.is_neg():  # a negative-bit view: its memory holds -values
        COPIES["weight"] += 1
        weight = weight.resolve_neg()
    stride = weight.stride()[0]  # (stride() is cheaper to call than stride(0))
    if stride == 1 or weight.shape[0] == 1:
        return weight, 1
    if stride * (weight.shape[0] - 1) > _INT32_MAX:
        COPIES["weight"] += 1
        return weight.contiguous(), 1
    return weight, stride


_TL_DTYPES = {torch.float32: tl.float32, torch.float64: tl.float64}
#: Every dtype a kernel stores, for the constexpr of a rounding (the folded dy sum's).
_TL_STORED = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, **_TL_DTYPES}


def _device_index(t: torch.Tensor) -> int | None:
    """The CUDA device index of ``t``, or None where kernels run in the interpreter."""
    if BACKEND == "interpreter":
        return None
    index = t.get_device()
    return index if index >= 0 else None


#: Counter buffers kept between launches, per (device, stream, what): ``"tree"`` for the dweight
#: tree (its kernel leaves them at zero), a split for the split-row forward's arrivals (each
#: launch adds exactly ``split`` to each row it walks, see kernels.forward_split._split_load).
_COUNTERS: dict[tuple[int, int, object], torch.Tensor] = {}


def _stream_counters(device, index, what, size: int, dtype: torch.dtype) -> torch.Tensor:
    """At least ``size`` counters of ``dtype`` kept for this stream and ``what``: zeros at first,
    then what the last launch of the same ``what`` left. Launches on one stream run one after
    another, so one buffer per (device, stream, what) serves them all without a memset. Under
    CUDA-graph capture each launch gets its own zeros (a memset node in the graph, replayed
    before the kernel), so graphs never share counters with each other or with eager calls;
    in the interpreter every launch gets zeros too."""
    if index is None or torch.cuda.is_current_stream_capturing():
        return torch.zeros(size, device=device, dtype=dtype)
    key = (index, torch._C._cuda_getCurrentRawStream(index), what)
    counters = _COUNTERS.get(key)
    if counters is None or counters.numel() < size:
        counters = torch.zeros(max(size, 4096), device=device, dtype=dtype)
        _COUNTERS[key] = counters
    return counters


def tree_counters(device: torch.device, index: int | None, size: int) -> torch.Tensor:
    """``size`` int32 zeros for the dweight tree of one backward launch (each launch leaves its
    counters at zero; see :func:`_stream_counters`)."""
    return _stream_counters(device, index, "tree", size, torch.int32)


def split_counters(device: torch.device, index: int | None, split: int, size: int) -> torch.Tensor:
    """``size`` int64 arrival counters for one split-row forward launch of ``split`` programs a
    row, each a multiple of ``split`` (zeros, or what earlier launches of this ``split`` on this
    stream left; see :func:`_stream_counters`)."""
    return _stream_counters(device, index, split, size, torch.int64)


def tma_ready(t: torch.Tensor, row_stride: int) -> bool:
    """Whether rows of ``t`` (unit column stride, ``row_stride`` elements apart) can go through a
    tensor descriptor: a 16-byte aligned base and row stride, rows that do not overlap (an
    expanded gradient's stride 0 stays with the pointer kernels), in a dtype it moves."""
    return (
        t.dtype in _TMA_DTYPES
        and _DATA_PTR(t) % 16 == 0
        and row_stride >= t.shape[-1]
        and (row_stride * t.element_size()) % 16 == 0
    )


#: (dtype, N, rows) -> the fields of a descriptor that Triton's constructor validated, less its
#: base, shape and strides (which no validation here depends on but the base's and row stride's
#: alignment, which tma_ready checks before any TMA launch, and M > 0, which launch_backward
#: returns before): see :func:`_rows_desc`.
_DESC_FIELDS: dict[tuple[torch.dtype, int, int], dict | None] = {}
#: The fields a descriptor may have for its copies to be made (Triton 3.6-3.9 have these): a
#: Triton whose constructor sets anything else (it might derive it from the base) gets every
#: descriptor from the constructor (a None in _DESC_FIELDS).
_DESC_COPIED = frozenset({"shape", "strides", "block_shape", "padding", "round_f32_to_tf32"})
_new_object = object.__new__


def _rows_desc(t: torch.Tensor, m: int, row_stride: int, rows: int) -> TensorDescriptor:
    """A descriptor of ``m`` rows of ``t`` viewed as ``(M, N / chunk, chunk)``, box
    ``(rows, N / chunk, chunk)`` with ``chunk = min(N, TMA_CHUNK)``.

    The first descriptor of each (dtype, N, rows) goes through ``TensorDescriptor``'s
    constructor, whose checks (the box, the strides, the alignment) then hold for every later
    one of the same key but for the base and row stride, which the launchers check with
    :func:`tma_ready`: later ones are copies of its fields with the base, M and row stride
    swapped in (2.5 against 4.6 us on the CI CPU; the TMA backward makes three a launch). Only
    where its fields are the known ones (:data:`_DESC_COPIED`, ``round_f32_to_tf32`` from Triton
    3.9): otherwise every descriptor comes from the constructor."""
    n = t.shape[-1]
    chunk = min(n, TMA_CHUNK)
    t = uncow(t)  # the launcher reads the base's data_ptr(): not of a COW input
    key = (t.dtype, n, rows)
    fields = _DESC_FIELDS.get(key)
    if fields is None:
        desc = TensorDescriptor(
            t, [m, n // chunk, chunk], [row_stride, chunk, 1], [rows, n // chunk, chunk]
        )
        if key not in _DESC_FIELDS:
            fields = {k: v for k, v in vars(desc).items() if k != "base"}
            _DESC_FIELDS[key] = fields if fields.keys() <= _DESC_COPIED else None
        return desc
    desc = _new_object(TensorDescriptor)
    state = vars(desc)
    state.update(fields)
    state["base"] = t
    state["shape"] = [m, n // chunk, chunk]
    state["strides"] = [row_stride, chunk, 1]
    state["block_shape"] = [rows, n // chunk, chunk]
    return desc


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
    microseconds of host time); otherwise :func:`as_rows` (a view, or a counted copy). A
    negative-bit view is resolved first (a counted copy): the kernels read memory.
    """
    if t.is_neg():  # a negative-bit view (torch._neg_view): its memory holds -values
        COPIES[name] += 1
        t = t.resolve_neg()
    if t.is_contiguous():
        return t, t.shape[-1]
    rows = as_rows(t, name)
    return rows, rows.stride()[0]


def _empty_out(like: torch.Tensor, dtype: torch.dtype, shape=None) -> torch.Tensor:
    """A contiguous tensor of ``shape`` (default ``like``'s; ``empty_like`` is the cheapest
    allocation), on ``like``'s device."""
    if shape is not None:
        return torch.empty(shape, device=like.device, dtype=dtype)
    if dtype == like.dtype:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    return torch.empty(like.shape, device=like.device, dtype=dtype)


def _evict(config: ForwardConfig) -> str:
    """The forward kernels' ``X_EVICT`` constexpr for ``config``."""
    return "evict_last" if config.evict_last else ""


def _heuristic_forward(x2, residual2, m, n, index, acc, cluster_plans=True) -> ForwardConfig:
    """The heuristic's forward config for these rows (:func:`config.forward_config`);
    ``cluster_plans=False``: what it takes without a CLUSTER_FORWARD plan (for tuning scripts)."""
    # packed rows: 16-bit and no residual (x + residual and the 16-bit row spill there)
    packable = x2.dtype if x2.element_size() == 2 and residual2 is None else None
    has_residual = residual2 is not None
    row_bytes = 0 if has_residual else n * x2.element_size()
    return forward_config(
        m,
        n,
        index,
        acc == torch.float64,
        packable,
        row_bytes,
        x2.element_size(),
        has_residual,
        x2.dtype if cluster_plans else None,
    )


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
    config: ForwardConfig | None = None,
    keep_rstd: bool = True,
    shape: torch.Size | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Rows in: ``(y, h or None, rstd (M,) ACC)`` out; ``y`` (``out_dtype``) and ``h``
    (``x2.dtype``) are contiguous with ``x2``'s shape, or ``shape`` (of as many values: the
    caller's ``[..., N]`` where ``x2`` is its rows viewed or copied to 2-D; the kernels write
    contiguous rows either way). ``keep_rstd=False`` (nothing will differentiate): rstd is
    neither allocated nor stored, and comes back None.

    ``x2``: ``(M, N)`` with unit column stride, or any ``[..., N]`` whose rows are ``stride_x``
    elements apart (a contiguous tensor: ``stride_x = N``); the same for ``residual2``.
    ``weight``: ``(N,)`` with any stride. ``llama``: round ``x * r`` to ``x2.dtype`` before the
    weight (see :func:`output_dtype`). ``config``: the launch geometry (default: the heuristic's,
    :func:`config.forward_config`); an explicit one is checked first.
    """
    if COPY_COW_INPUTS:  # torch 2.11: no read-only address (see launch.readable)
        x2, weight, residual2 = readable(x2), readable(weight), readable(residual2)
    n = x2.shape[-1]
    m = x2.numel() // n
    sx = x2.stride()[0] if stride_x is None else stride_x
    acc = _acc_dtype(x2.dtype)
    y = _empty_out(x2, out_dtype, shape)
    h = None if residual2 is None else _empty_out(x2, x2.dtype, shape)
    if m == 0:
        return y, h, (torch.empty(0, device=x2.device, dtype=acc) if keep_rstd else None)
    index = _device_index(x2)
    half = x2.element_size() == 2
    explicit = config is not None
    if config is None:
        config = _heuristic_forward(x2, residual2, m, n, index, acc)
    else:
        config.check(n)
        check_pdl("ForwardConfig.pdl", config.pdl, index)
        check_forward_cluster(config, index)
        if config.split:
            check_forward_split(config, index)
            if config.stages > 1:  # the staged split kernel pipelines x and the residual
                r_size = 0 if residual2 is None else residual2.element_size()
                check_forward_stages(config, x2.element_size(), r_size, index, "the residual")
        elif config.stages > 1:
            w_size = 0 if weight is None else weight.element_size()
            check_forward_stages(config, x2.element_size(), w_size, index)
        if config.packed and not half:
            raise ContractValueError(
                "ForwardConfig.packed keeps 16-bit rows (float16, bfloat16) packed "
                f"(got x {x2.dtype})"
            )
    block, rows = config.block, config.rows
    floats = (*split_float(eps), *split_float(offset))
    weight, sw = weight_of(weight)
    has_w, has_r = weight is not None, residual2 is not None
    w = weight if has_w else x2
    if has_r:
        r, sr = residual2, (residual2.stride()[0] if stride_res is None else stride_res)
    else:
        r, sr = x2, 0
    # (sizes as ints: cheaper to parse). Inference skips the allocation, one fewer per call,
    # unless the config stores rstd anyway (stores_rstd); with no store, y is a fresh placeholder
    # the kernel never writes through.
    store = stores_rstd(config, keep_rstd)
    rs = torch.empty(m, device=x2.device, dtype=acc) if store else y
    rstd = rs if keep_rstd else None
    pdl = config.pdl
    if config.cluster:
        c = config.cluster
        if m * c > _INT32_MAX:
            raise ContractValueError(
                f"ForwardConfig.cluster: M * cluster CTAs must stay below 2**31 (got M={m}, "
                f"cluster={c}); use fewer CTAs a row"
            )
        c_pow2 = 1 << (c - 1).bit_length()
        part = torch.empty(m * c_pow2, device=x2.device, dtype=acc) if c > 1 else rs
        kernel = FORWARD_CLUSTER
        if config.maxnreg:
            kernel = FORWARD_CLUSTER_CAPPED.get(config.maxnreg)
            if kernel is None:
                kernel = FORWARD_CLUSTER_CAPPED[config.maxnreg] = CachedKernel(
                    kernels.rmsnorm_forward_cluster_kernel, cluster=True, maxnreg=config.maxnreg
                )
        kernel.launch(
            (m,),  # the launcher makes m clusters of c CTAs
            (x2, r, w, y, h if has_r else y, rs, part, sx, sr, sw, n),
            floats,
            (has_w, has_r, llama, _TL_DTYPES[acc], block, c, c_pow2, offset != 0.0, store)
            + (n == c * block, not config.maxnreg),
            config.num_warps,
            1,
            index,
            c,
        )
        return y, h, rstd
    if config.split:
        c = config.split
        grid = split_grid(config, m, index)
        check_split_tasks(m, c, grid, max(2, config.stages - 1))
        c_pow2 = 1 << (c - 1).bit_length()
        part = torch.empty(m * c_pow2, device=x2.device, dtype=acc)
        count = split_counters(x2.device, index, c, m)
        args = (x2, r, w, y, h if has_r else y, rs, part, count, sx, sr, sw, m, n)
        consts = (has_w, has_r, llama, _TL_DTYPES[acc], block, c, c_pow2, offset != 0.0, store)
        kernel = FORWARD_SPLIT
        if config.stages > 1:  # compiled: the wait in asm (see kernels.forward_split._split_parts)
            kernel, consts = FORWARD_SPLIT_STAGED, (*consts, config.stages, index is not None)
        if _launch_split(kernel, grid, c, args, floats, consts, config.num_warps, index):
            return y, h, rstd
        if explicit:
            raise ContractValueError(
                f"ForwardConfig.split={c}: this GPU context cannot keep one row's {c} programs "
                "resident at once (it sees fewer SMs than the device has, e.g. under MPS); use "
                "a config without split"
            )
        # The heuristic now sees the device's cap, below this split (its split depends on N
        # alone): it takes the chunked walk, launched below.
        config = _heuristic_forward(x2, residual2, m, n, index, acc)
        block, rows = config.block, config.rows
    if rows:
        FORWARD_ROWS.launch(
            (-(-m // rows),),  # ceil division (triton.cdiv is slow to call)
            (x2, r, w, y, h if has_r else y, rs, sx, sr, sw, m, n),
            floats,
            (has_w, has_r, llama, _TL_DTYPES[acc], block, rows, _evict(config), store, pdl),
            config.num_warps,
            1,
            index,
            config.ctas,
            pdl,
        )
    else:
        FORWARD.launch(
            (m,),
            (x2, r, w, y, h if has_r else y, rs, sx, sr, sw, n),
            floats,
            (
                has_w,
                has_r,
                llama,
                _TL_DTYPES[acc],
                block,
                block >= n,
                config.packed,
                config.unmasked,
                offset != 0.0,
                _evict(config),
                store,
                pdl,
                config.stream,
                config.stages,
            ),
            config.num_warps,
            1,
            index,
            config.ctas,
            pdl,
        )
    return y, h, rstd


def _launch_split(kernel, grid, c, args, floats, consts, num_warps, index) -> bool:
    """Launch the split-row forward ``kernel`` (FORWARD_SPLIT or FORWARD_SPLIT_STAGED) on
    ``grid`` programs, or on fewer where the driver refuses a
    cooperative grid that large ("too many blocks in cooperative launch": nothing ran). The
    grid is persistent: any multiple of ``c`` walks every task, and a row's sum does not depend
    on it (the same bits). So the grid is halved until it launches, and the device's cap is
    recorded (:func:`config.cap_split_grid`) and logged. Returns False, with nothing launched,
    where not even one row's ``c`` programs are resident at once."""
    while True:
        try:
            kernel.launch((grid,), args, floats, consts, num_warps, 1, index)
            return True
        except RuntimeError as e:
            if "cooperative launch" not in str(e):
                raise
            fewer = grid // 2 // c * c
            cap_split_grid(index, max(fewer, grid // 2))
            log.warning(
                "the split-row forward's cooperative grid of %d programs was refused on device "
                "%s (%s); %s",
                grid,
                index,
                e,
                f"launching {fewer} instead" if fewer >= c else f"{c} a row cannot be resident",
            )
            if fewer < c:
                return False
            grid = fewer


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
    config: BackwardConfig | None = None,
    dy_parts: tuple[tuple[torch.Tensor, int], ...] = (),
    dy_sum_dtype: torch.dtype | None = None,
    dx2_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows in: ``(dx, dweight (N,) weight.dtype or None)`` out; ``dx`` (``dx_dtype``) is
    contiguous with ``dy2``'s shape. Rows and strides as in :func:`launch_forward`; ``llama``
    as the forward's (dweight sums ``dy`` times ``x * r`` rounded to ``x2.dtype``). ``config``:
    the launch geometry (default: :func:`config.backward_config`'s); an explicit one is checked
    first. dweight is bitwise reproducible for a given config. ``dy_parts``: up to two more
    ``(rows, row stride)`` of dy2's shape and dtype; the kernels read ``(dy + b) + c`` summed in
    the accumulator and rounded once to ``dy_sum_dtype`` (default dy2's; what Inductor's fused
    add stores; the Inductor pass folds such sums in). ``dx2_out``: a fresh contiguous tensor of
    dx's shape in another dtype, which the kernels fill with dx's values rounded to it (the
    Inductor pass's dx cast)."""
    if COPY_COW_INPUTS:  # torch 2.11: no read-only address (see launch.readable)
        dy2, x2, weight, dh2 = readable(dy2), readable(x2), readable(weight), readable(dh2)
        rstd = readable(rstd)
        dy_parts = tuple((readable(p), s) for p, s in dy_parts)
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
    sdy = dy2.stride()[0] if stride_dy is None else stride_dy
    sx = x2.stride()[0] if stride_x is None else stride_x
    acc = rstd.dtype
    index = _device_index(x2)
    if config is None:
        itemsize = max(x2.element_size(), dy2.element_size())
        first = tma_from(n, itemsize)  # None: no TMA plan for this width
        tma = (
            index is not None
            and first is not None
            and m >= first
            and dx.dtype in _TMA_DTYPES
            and hopper(index)
            and tma_ready(x2, sx)
            and tma_ready(dy2, sdy)
        )
        config = backward_config(m, n, index, acc == torch.float64, itemsize=itemsize, tma=tma)
    else:
        config.check(m, n)
        check_pdl("BackwardConfig.pdl", config.pdl, index)
        check_backward_cluster(config, index)
        if config.tma and not (tma_ready(x2, sx) and tma_ready(dy2, sdy) and tma_ready(dx, n)):
            raise ContractValueError(
                "BackwardConfig.tma needs x, dy and dx in float16, bfloat16 or float32 with "
                "16-byte aligned data and row strides, rows not overlapping (got x "
                f"{x2.dtype} stride {sx}, dy {dy2.dtype} stride {sdy}, dx {dx.dtype})"
            )
        if config.tma and config.stages > 1:
            tile = config.rows * n * min(x2.element_size(), dy2.element_size(), dx.element_size())
            if tile < TMA_PIPELINED_MIN_BYTES:
                raise ContractValueError(
                    f"BackwardConfig.tma with stages > 1 needs tiles of at least "
                    f"{TMA_PIPELINED_MIN_BYTES} bytes per tensor, rows * N * itemsize (got "
                    f"stages={config.stages}, rows={config.rows}, N={n}: {tile} bytes)"
                )
    block, one_tile, groups, tree = config.block, config.one_tile, config.groups, config.tree
    # PDL (config.PDL): the row kernels let the sum launch start early (their PDL constexpr) but
    # launch without the attribute themselves (CachedKernel's default); only the sum launch has it.
    pdl = config.pdl
    tiles = config.tiles_for(n)
    dw_acc = torch.float64 if config.dw_float64 or acc == torch.float64 else torch.float32
    offsets = split_float(offset)
    w = weight if has_w else x2
    parts = 1 + len(dy_parts)
    sum_dtype = _TL_STORED[dy2.dtype if dy_sum_dtype is None else dy_sum_dtype]
    # Absent parts: dy itself as the placeholder pointer (never read: DY_PARTS is a constexpr).
    (dy_b, s_b), (dy_c, s_c) = (*dy_parts, (dy2, 0), (dy2, 0))[:2]
    mean_ux = rstd  # placeholder pointer when the row reduction happens in the tile kernel
    if not one_tile and not config.cluster:
        mean_ux = torch.empty_like(rstd)
        ROW_DOT.launch(
            (m,),
            (dy2, x2, w, mean_ux, dy_b, dy_c, sdy, sx, sw, s_b, s_c, n),
            offsets,
            (has_w, parts, sum_dtype, _TL_DTYPES[acc], ROW_DOT_BLOCK, pdl),
            ROW_DOT_WARPS,
            1,
            index,
        )
    dw = partial = counters = rstd  # placeholder pointers without a weight (or tree)
    if has_w:
        device = x2.device
        dw = torch.empty(n, device=device, dtype=weight.dtype)
        # The tree adds partials in its float64 slots; the sum launch widens float32 ones.
        # Column strips (dw_columns) write dweight itself: no partials.
        if not config.dw_columns:
            partial = torch.empty(groups, n, device=device, dtype=torch.float64 if tree else dw_acc)
        if tree:
            counters = tree_counters(device, index, tiles * groups)
    if dh2 is not None:
        dh, sdh = dh2, (dh2.stride()[0] if stride_dh is None else stride_dh)
    else:
        dh, sdh = dy2, 0
    dx2 = dx if dx2_out is None else dx2_out
    # The constexprs every backward kernel starts with (kernels/: HAS_WEIGHT ... BLOCK).
    flags = (has_w, dh2 is not None, parts, sum_dtype, dx2_out is not None, llama)
    flags += (_TL_DTYPES[acc], _TL_DTYPES[dw_acc], block)
    if config.cluster:
        c = config.cluster
        c_pow2 = 1 << (c - 1).bit_length()
        BACKWARD_CLUSTER.launch(
            (groups,),  # the launcher makes groups clusters of c CTAs
            (dy2, x2, w, rstd, dh, dy_b, dy_c, dx, dx2, partial)
            + (torch.empty(m * c_pow2, device=x2.device, dtype=acc) if c > 1 else rstd,)
            + (sdy, sx, sdh, sw, s_b, s_c, m, n, config.rows_per_program),
            offsets,
            flags + (c, c_pow2, pdl, config.prefetch),
            config.num_warps,
            1,
            index,
            c,
        )
    elif config.tma:
        BACKWARD_TMA.launch(
            (groups,),
            (_rows_desc(dy2, m, sdy, config.rows), _rows_desc(x2, m, sx, config.rows))
            + (_rows_desc(dx, m, n, config.rows), w, rstd, dh, dy_b, dy_c, dx2, dw, partial)
            + (counters,)
            + (sdh, sw, s_b, s_c, m, n, config.rows_per_program),
            offsets,
            flags
            + (n // min(n, TMA_CHUNK), min(n, TMA_CHUNK), config.rows, config.stages, tree)
            + (config.fanout, config.strided, pdl),
            config.num_warps,
            1,
            index,
        )
    elif config.dw_columns:
        strips = -(-n // config.dw_columns) if has_w else 0
        BACKWARD_COLUMNS.launch(
            (groups + strips,),
            (dy2, x2, w, rstd, dh, dy_b, dy_c, dx, dx2, dw, sdy, sx, sdh, sw, s_b, s_c, m, n)
            + (config.rows_per_program, groups),
            offsets,
            flags + (config.stages, config.dw_columns, config.dw_rows, pdl),
            config.num_warps,
            1,
            index,
        )
    elif config.rows > 1:
        BACKWARD_ROWS.launch(
            (groups,),
            (dy2, x2, w, rstd, dh, dy_b, dy_c, dx, dx2, dw, partial, counters, sdy, sx, sdh)
            + (sw, s_b, s_c, m, n, config.rows_per_program),
            offsets,
            flags + (config.rows, config.stages, tree, config.fanout, pdl),
            config.num_warps,
            1,
            index,
            config.ctas,
        )
    else:
        BACKWARD.launch(
            (groups, tiles),
            (dy2, x2, w, rstd, mean_ux, dh, dy_b, dy_c, dx, dx2, dw, partial, counters, sdy, sx)
            + (sdh, sw, s_b, s_c, m, n, config.rows_per_program),
            offsets,
            flags + (one_tile, config.stages, tree, config.fanout, pdl),
            config.num_warps,
            1,
            index,
            config.ctas,
        )
    if has_w and not tree and not config.dw_columns:
        block_n = SUM_BLOCK_N if index is not None else INTERPRETER_SUM_BLOCK_N
        DW_SUM.launch(
            (-(-n // block_n),),
            (partial, dw, groups, n),
            (),
            (SUM_BLOCK_G, block_n, pdl),
            4,
            1,
            index,
            1,
            pdl,
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

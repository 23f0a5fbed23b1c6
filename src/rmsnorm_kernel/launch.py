"""Launch ``@triton.jit`` kernels through cached compiled handles: the host-cost hot path.

``kernel[grid](...)`` (``JITFunction.run``) binds every argument, computes Triton's specialisation
of each, hashes a cache key, builds launch metadata and only then calls the compiled launcher;
on a slow host that costs tens of microseconds per launch. Here the first launch of each
specialisation goes through ``JITFunction.run`` (which compiles it and returns the
``CompiledKernel``); later launches with the same key call the compiled launcher directly
(``CompiledKernel.run``, the call ``JITFunction.run`` itself ends with, stable in triton 3.6-3.9).

The key must separate everything Triton specialises on, or a handle compiled for other
arguments would run: the device, the constexpr values, ``num_warps``/``num_stages``, each
pointer's dtype and 16-byte alignment, each integer's class (== 1, divisible by 16, fits in
int32, as ``triton._C.libtriton.native_specialize_impl`` classifies them), and each tensor
descriptor's dtype, box and padding (its shape and strides are encoded at every launch by the
compiled launcher itself). On the hot path an integer's class comes from a table of the values
seen so far, read at C speed (``map`` over ``dict.__getitem__``), instead of a Python call per
integer; classes, not values, so that a new row count of the same class (variable-length
batches) still takes the cached handle. The tensors' addresses, read once for their alignment,
are what the cached launch hands the compiled launcher (see :class:`_Layout`).

Triton's interpreter (the CPU backend) has no compiled handle: there every launch takes
``kernel[grid](...)``, as does any launch while a Triton launch hook (a profiler) is installed.
"""

from __future__ import annotations

import operator
import warnings
from functools import reduce

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from .backend import BACKEND

try:  # triton >= 3.4 keeps hooks in knobs; older ones on CompiledKernel
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - outside the supported range
    _knobs = None

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
#: The tensors' addresses, read without materialising a lazily cloned (copy-on-write) tensor:
#: the kernels write only tensors this package allocated, never the caller's. ``data_ptr`` is the
#: mutable access, which copies a COW tensor's storage; ``const_data_ptr`` is the read-only one,
#: new in torch 2.12 (2.11 has none: seen on the H100 image, ``experiments/kernel_perf/
#: cow_probe.py``), so there the launchers first swap COW inputs for copies (:func:`readable`).
_DATA_PTR = getattr(torch.Tensor, "const_data_ptr", torch.Tensor.data_ptr)
_IS_COW = getattr(torch._C, "_is_cow_tensor", None)
_is_compiling = torch.compiler.is_compiling
#: Whether :func:`readable` has anything to do: a torch with COW tensors but no read-only address.
COPY_COW_INPUTS = _IS_COW is not None and not hasattr(torch.Tensor, "const_data_ptr")
_DTYPE = operator.attrgetter("dtype")

#: Handles kept per kernel before the table is emptied and refilled (a safety bound: keys hold
#: classes, so a table grows only with configs and dtypes).
MAX_HANDLES = 4096
#: Integer values whose class :data:`_INT_CLASSES` remembers before it is emptied (row counts
#: of variable-length batches are new values; an entry is a few dozen bytes).
MAX_INT_CLASSES = 65536
#: value -> its class (:func:`_spec`), the hot path's table.
_INT_CLASSES: dict[int, int] = {}


def _int_classes(ints: tuple[int, ...]) -> tuple[int, ...]:
    """``tuple(_spec(a) for a in ints)``, by table look-ups at C speed once a value was seen."""
    try:
        return tuple(map(_INT_CLASSES.__getitem__, ints))
    except KeyError:
        if len(_INT_CLASSES) >= MAX_INT_CLASSES:
            _INT_CLASSES.clear()
        for a in ints:
            _INT_CLASSES[a] = _spec(a)
        return tuple(map(_INT_CLASSES.__getitem__, ints))


def _hooks_installed() -> bool:
    """A launch hook (e.g. Triton's profiler) must see every launch: then take the slow path."""
    if _knobs is None:
        return False
    runtime = _knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


def _gather(positions: tuple[int, ...]):
    """``args -> tuple(args[i] for i in positions)`` at C speed (``itemgetter`` of one index
    returns the item itself, of none fails)."""
    if not positions:
        return lambda args: ()
    if len(positions) == 1:
        (i,) = positions
        return lambda args: (args[i],)
    return operator.itemgetter(*positions)


def _snapshot(t: torch.Tensor) -> torch.Tensor:
    """A private copy of the part of ``t``'s storage it spans, viewed with ``t``'s exact layout
    (sizes, strides and offset: the kernels get row strides apart from the tensor). Reading a
    copy-on-write tensor does not materialise it."""
    if t.numel() == 0:
        return t  # nothing is read
    spans = zip(t.shape, t.stride(), strict=True)
    extent = t.storage_offset() + 1 + sum((n - 1) * s for n, s in spans)
    flat = t.as_strided((extent,), (1,), 0).clone()
    return flat.as_strided(t.shape, t.stride(), t.storage_offset())


def without_cow(args: tuple) -> tuple:
    """``args`` with each lazily cloned (copy-on-write) tensor replaced by :func:`_snapshot`.

    Triton's own launch path (its interpreter, which copies every tensor argument back after the
    kernel, and ``JITFunction.run`` / a tensor descriptor, which read ``data_ptr()``) takes each
    tensor's mutable storage, and that materialises a COW tensor: the caller's input (from
    ``torch._lazy_clone``) would lose its sharing, as PyTorch's ``test_cow_input`` checks
    F.rms_norm does not. The kernels write only tensors this package allocated, so a COW tensor
    here is an input, and reading a snapshot of it gives the same values. The pointer kernels'
    cached launches never call this (they hand the launcher addresses read with
    ``const_data_ptr``); the descriptor kernel's cached launches pay one check per tensor."""
    if _IS_COW is None or not any(isinstance(a, torch.Tensor) and _IS_COW(a) for a in args):
        return args
    return tuple(_snapshot(a) if isinstance(a, torch.Tensor) and _IS_COW(a) else a for a in args)


def uncow(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a :func:`_snapshot` of it where it is lazily cloned (copy-on-write): what
    :func:`without_cow` does to one tensor, without building tuples."""
    if _IS_COW is not None and _IS_COW(t):
        return _snapshot(t)
    return t


def readable(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t``, or where reading its address would copy its storage (:data:`COPY_COW_INPUTS`, a
    lazily cloned ``t``) a :func:`_snapshot` of it: the same values in the same layout, and
    the caller's tensor stays lazy. The launchers (``ops.launch_forward`` / ``launch_backward``)
    call it on each input before anything reads an address, when ``COPY_COW_INPUTS``."""
    if t is None or not COPY_COW_INPUTS or not _IS_COW(t):
        return t
    return _snapshot(t)


@torch.compiler.disable
def _interpret(fn, grid, args, floats, consts, num_warps, num_stages, num_ctas) -> None:
    """A launch through Triton's interpreter (or a kernel without a device index). Never traced
    by Dynamo: where Dynamo falls back to running a frame eagerly (``torch.func.grad`` of a
    ``torch.compile``d call) it still traces the frames called from it, and tracing the
    interpreter's Python execution of a kernel fails on fake tensors (``KeyError(torch.uint64)``)
    instead of running the kernel. The interpreter's floating-point RuntimeWarnings are off: it
    computes with numpy, which warns where a GPU (and F.rms_norm) silently gives inf or NaN (a
    zero row with eps <= 0, an overflowing sum of squares), pointing at Triton's internals."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
        fn[grid](
            *without_cow(args),
            *floats,
            *consts,
            num_warps=num_warps,
            num_stages=num_stages,
            num_ctas=num_ctas,
        )


class _Layout:
    """Which positions of one kernel's ``args`` hold tensors, ints and anything else (tensor
    descriptors), learned from a first launch; every launcher passes the same kinds at the same
    positions, which :meth:`check` confirms on each compile.

    ``direct``: the args are tensors, then ints, and nothing else (every kernel here but the
    descriptor one). Their cached launches hand Triton's launcher the tensors' addresses as ints,
    which it takes as they are; a tensor costs it a ``data_ptr()`` call and a
    ``cuPointerGetAttribute`` (on the H200 host, 12 pointers: 7.2 against 10.2 us per launch,
    ``experiments/kernel_perf/launch_cost.py``).
    """

    def __init__(self, args: tuple) -> None:
        self.kinds = tuple(_kind(a) for a in args)
        pick = lambda kind: tuple(i for i, k in enumerate(self.kinds) if k == kind)
        tensors, ints, self.others = pick("tensor"), pick("int"), pick("other")
        self.tensors, self.ints = _gather(tensors), _gather(ints)
        self.direct = not self.others and tensors + ints == tuple(range(len(args)))

    def check(self, args: tuple) -> None:
        kinds = tuple(_kind(a) for a in args)
        if kinds != self.kinds:
            raise TypeError(
                f"a launcher passed other kinds of arguments than before (got {kinds}, "
                f"keyed as {self.kinds})"
            )


def _kind(arg) -> str:
    if type(arg) is int:
        return "int"
    return "tensor" if isinstance(arg, torch.Tensor) else "other"


def _spec(arg) -> object:
    """What Triton specialises a tensor or an int argument on (see the module docstring); a
    dtype stands for itself."""
    if type(arg) is int:
        if arg == 1:
            return 1
        return 2 + (arg % 16 == 0) + 4 * (_INT32_MIN <= arg <= _INT32_MAX)
    if isinstance(arg, torch.Tensor):
        return arg.dtype, _DATA_PTR(arg) % 16 == 0
    if isinstance(arg, torch.dtype):
        return arg
    if isinstance(arg, TensorDescriptor):  # typed by its values and box (encoded per launch)
        return arg.base.dtype, tuple(arg.block_shape), arg.padding
    raise TypeError(
        "specialised kernel arguments are tensors, ints or tensor descriptors "
        f"(got {type(arg).__name__})"
    )


class CachedKernel:
    """``launch(grid, args, floats, consts, num_warps, num_stages, device_index, num_ctas=1,
    pdl=False)`` for one kernel (``num_ctas > 1``: each program is a thread-block cluster of that
    many CTAs; ``pdl``: launched with programmatic dependent launch, compiled kernels on Hopper or
    newer only, and the kernel must wait at its start: ``kernels.common._pdl_prologue``).

    The kernel's parameters must come in this order: tensors and ints (``args``, specialised),
    floats (``floats``, never specialised by Triton), then constexprs (``consts``, a hashable
    tuple in signature order). ``cooperative``: every compiled launch is cooperative
    (``launch_cooperative_grid``). ``maxnreg``: every compile capped at that many registers a
    thread (ptxas; 0: no cap). ``cluster``: ``num_ctas`` makes *launch* clusters of a kernel
    compiled for one CTA: program ``p`` of the grid becomes CTAs ``p * num_ctas ..`` of one
    cluster, each a whole program that finds its place from ``program_id`` (see
    :meth:`_compile_cluster`), where otherwise Triton splits one program's tensors over the
    CTAs itself (Triton >= 3.8). ``launches`` counts ``compiled`` (through ``JITFunction.run``)
    and ``cached`` launches, so that GPU tests can check that the cached path really runs.
    """

    def __init__(
        self, fn, cooperative: bool = False, cluster: bool = False, maxnreg: int = 0
    ) -> None:
        self.fn = fn
        # compiled launches go through cuLaunchCooperativeKernel, which refuses a grid whose
        # programs cannot all be resident at once (kernels whose programs wait for each other)
        self._compile_options = {"launch_cooperative_grid": True} if cooperative else {}
        if maxnreg:  # ptxas' register cap, a compile option of every handle this one makes
            self._compile_options["maxnreg"] = maxnreg
        self.cluster = cluster
        self._clustered: dict[tuple, object] = {}  # key -> CompiledKernel (for launch hooks)
        self._layouts: dict[int, _Layout] = {}  # per len(args): the floats come after them
        self.handles: dict[tuple, tuple] = {}
        self.launches = {"compiled": 0, "cached": 0}

    def key(
        self,
        args: tuple,
        consts: tuple,
        num_warps: int,
        num_stages: int,
        device_index: int,
        num_ctas: int = 1,
        pdl: bool = False,
    ) -> tuple:
        """The handle key of a launch (see the module docstring)."""
        return self._key(args, consts, num_warps, num_stages, device_index, num_ctas, pdl)[0]

    def _key(self, args, consts, num_warps, num_stages, device_index, num_ctas, pdl):
        """``(key, the tensors' addresses, the ints, layout)``. Alignment: one OR of every
        address (outputs included: finer than Triton's key, never coarser) says whether all are
        16-byte aligned, the common case; otherwise each tensor's own alignment is keyed."""
        layout = self._layouts.get(len(args))
        if layout is None:
            layout = self._layouts[len(args)] = _Layout(args)
        tensors, ints = layout.tensors(args), layout.ints(args)
        ptrs = tuple(map(_DATA_PTR, tensors))
        aligned = not reduce(operator.or_, ptrs, 0) & 15 or tuple(p % 16 == 0 for p in ptrs)
        key = (
            device_index,
            consts,
            num_warps,
            num_stages,
            num_ctas,
            pdl,
            _int_classes(ints),
            tuple(map(_DTYPE, tensors)),
            aligned,
            *[_spec(args[i]) for i in layout.others],
        )
        return key, ptrs, ints, layout

    def launch(
        self,
        grid: tuple[int, ...],
        args: tuple,
        floats: tuple,
        consts: tuple,
        num_warps: int,
        num_stages: int,
        device_index: int | None,
        num_ctas: int = 1,
        pdl: bool = False,
    ) -> None:
        """Launch ``fn`` on ``grid``: ``args`` (tensors, then ints, then descriptors), then the
        runtime ``floats`` and the constexpr ``consts``, in the kernel's parameter order."""
        # Never traced by Dynamo (as _interpret): where it falls back to running a frame eagerly
        # (``torch.func.grad`` of a ``torch.compile``d call) it traces the frames called from it,
        # and a guard on ``self.handles[key]`` cannot be built (the key holds Triton dtypes, whose
        # names a guard cannot resolve: ``NameError: name 'triton' is not defined``). Dynamo reads
        # ``is_compiling()`` as True and stops at the disabled call; eagerly this test costs
        # ~0.1 us where ``torch.compiler.disable`` on ``launch`` itself cost ~0.35 (its wrapper
        # swaps the frame evaluator twice per call).
        if _is_compiling():
            return _launch_untraced(
                self, grid, args, floats, consts, num_warps, num_stages, device_index, num_ctas, pdl
            )
        return self._launch(
            grid, args, floats, consts, num_warps, num_stages, device_index, num_ctas, pdl
        )

    def _launch(
        self, grid, args, floats, consts, num_warps, num_stages, device_index, num_ctas, pdl
    ) -> None:
        if BACKEND == "interpreter" or device_index is None:
            _interpret(self.fn, grid, args, floats, consts, num_warps, num_stages, num_ctas)
            return
        key, ptrs, ints, layout = self._key(
            args, consts, num_warps, num_stages, device_index, num_ctas, pdl
        )
        handle = self.handles.get(key)
        if self.cluster and num_ctas > 1:
            if handle is None:
                layout.check(args)
                handle = self._compile_cluster(
                    key, grid, args, floats, consts, num_warps, num_stages, device_index, num_ctas
                )
            if _hooks_installed():  # the hooks see this launch, as JITFunction.run's
                compiled = self._clustered[key]
                self._run_hooked(compiled, handle, grid, args, floats, consts, device_index)
                return
        elif handle is None or _hooks_installed():
            layout.check(args)
            if len(self.handles) >= MAX_HANDLES:
                self.handles.clear()
            with torch.cuda.device(device_index):
                compiled = self.fn[grid](
                    *without_cow(args),
                    *floats,
                    *consts,
                    num_warps=num_warps,
                    num_stages=num_stages,
                    num_ctas=num_ctas,
                    # the compiled launcher keeps both: cached launches of this key use them too
                    **({"launch_pdl": True} if pdl else {}),
                    **self._compile_options,
                )
            if hasattr(compiled, "result"):  # an async-compile future (triton >= 3.5)
                compiled = compiled.result()
            tail = self._defaults_after(len(args) + len(floats) + len(consts))
            self.handles[key] = (compiled.run, compiled.function, compiled.packed_metadata, tail)
            self.launches["compiled"] += 1
            return
        run, function, packed, tail = handle
        grid_1 = grid[1] if len(grid) > 1 else 1
        stream = torch._C._cuda_getCurrentRawStream(device_index)
        params = (grid[0], grid_1, 1, stream, function, packed, None, None, None)
        if layout.direct:
            args = (*ptrs, *ints)
        elif _IS_COW is not None and any(map(_IS_COW, layout.tensors(args))):
            # Triton's launcher reads these tensors' data_ptr() itself (see without_cow). Only
            # the tensor positions are asked (a descriptor's base was swapped when it was made:
            # ops._rows_desc); without_cow over every argument cost 5.4 us a launch on the CI
            # CPU for the descriptor kernel's 19.
            args = without_cow(args)
        if torch._C._cuda_getDevice() != device_index:
            # Tensors on another GPU than the current one (a model split over GPUs in one
            # process, e.g. Hugging Face's device_map="auto"): the launcher launches in the
            # current CUDA context (and checks pointers given as tensors there): theirs.
            with torch.cuda.device(device_index):
                run(*params, *args, *floats, *consts, *tail)
        else:
            run(*params, *args, *floats, *consts, *tail)
        self.launches["cached"] += 1

    def _defaults_after(self, passed: int) -> tuple:
        """The defaults of the kernel's parameters after the ``passed`` a launch gives: a JIT
        call fills them itself, Triton's compiled launcher takes every parameter (a missing one
        is refused by name here, not as a bare count from the launcher)."""
        rest = tuple(getattr(self.fn, "params", ()))[passed:]
        missing = [p.name for p in rest if not p.has_default]
        if missing:
            raise TypeError(f"{self.fn}: the launch gives no value for {', '.join(missing)}")
        return tuple(p.default for p in rest)

    def _compile_cluster(
        self, key, grid, args, floats, consts, num_warps, num_stages, device_index, num_ctas
    ) -> tuple:
        """Compile ``fn`` for one CTA, without launching it (``JITFunction.warmup``: a launch
        before the metadata is patched would run unclustered), and keep its handle with the
        packed launch metadata ``(num_warps, num_ctas, shared)`` (triton 3.6-3.9) patched to
        ``num_ctas``: Triton's NVIDIA launcher then sets the cluster dimension to it and
        multiplies the grid's x by it."""
        if len(self.handles) >= MAX_HANDLES:
            self.handles.clear()
            self._clustered.clear()
        with torch.cuda.device(device_index):
            compiled = self.fn.warmup(
                *without_cow(args), *floats, *consts, grid=grid, num_warps=num_warps,
                num_stages=num_stages, **self._compile_options,
            )  # fmt: skip
        if hasattr(compiled, "result"):  # an async-compile future (triton >= 3.5)
            compiled = compiled.result()
        compiled._init_handles()
        packed = compiled.packed_metadata
        if len(packed) != 3 or packed[1] != 1:
            raise RuntimeError(
                "rmsnorm_kernel: this Triton packs its launch metadata otherwise than (num_warps, "
                f"num_ctas, shared) (got {packed}); the cluster launch cannot be made"
            )
        tail = self._defaults_after(len(args) + len(floats) + len(consts))
        handle = (compiled.run, compiled.function, (packed[0], num_ctas, packed[2]), tail)
        self.handles[key] = handle
        self._clustered[key] = compiled
        self.launches["compiled"] += 1
        return handle

    @staticmethod
    def _run_hooked(compiled, handle, grid, args, floats, consts, device_index) -> None:
        """A cluster launch with Triton's launch hooks (a profiler) called around it, as
        ``CompiledKernel.run`` would."""
        run, function, packed, tail = handle
        stream = torch._C._cuda_getCurrentRawStream(device_index)
        grid3 = (*grid, 1, 1)[:3]
        hooks = _knobs.runtime
        meta = compiled.launch_metadata(grid3, stream, *args, *floats, *consts, *tail)
        with torch.cuda.device(device_index):
            run(
                *grid3, stream, function, packed, meta, hooks.launch_enter_hook,
                hooks.launch_exit_hook, *without_cow(args), *floats, *consts, *tail,
            )  # fmt: skip


#: :meth:`CachedKernel._launch` as Dynamo must meet it: a frame it runs eagerly, never traces.
_launch_untraced = torch.compiler.disable(CachedKernel._launch)

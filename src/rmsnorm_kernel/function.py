"""Autograd for the kernels: an eager ``autograd.Function`` and a ``torch.library`` op for compile.

``rmsnorm`` is the public entry. In eager mode it goes through :class:`RMSNormFunction` (the
lowest-overhead path); under ``torch.compile`` it calls the registered op
``torch.ops.rmsnorm_kernel.rmsnorm_fwd``, whose fake implementation lets Dynamo trace it with no
graph break. Both run the same launchers and count in :data:`CALLS`. A backward that builds a graph
(``create_graph=True``: double backward) runs the exact PyTorch-ops formula of
:mod:`.double_backward` instead of the Triton backward, in eager mode on both paths.
While a ``torch.func`` transform is active, or an input carries a forward-mode AD tangent,
``rmsnorm`` goes through :class:`.transforms.FuncRMSNormFunction` (the same forward launch;
derivatives in PyTorch ops), which those need.
"""

from __future__ import annotations

import warnings

import torch

from . import dtensor, nested, ops, transforms
from .contract import SUPPORTED_DTYPES, ContractTypeError, ContractValueError, check_contract
from .double_backward import (
    PLAIN_TENSORS,
    differentiable_backward,
    is_subclass,
    ops_backward_needed,
)
from .export_formula import export_formula

#: Passes through the wrapper, not kernel launches (a backward launches one to three kernels).
CALLS = {"forward": 0, "backward": 0}

_DOUBLE_BACKWARD = (
    "rmsnorm_kernel: double backward through torch.ops.rmsnorm_kernel.rmsnorm_bwd (the Triton "
    "backward) is not supported; differentiate rmsnorm() or rmsnorm_fwd instead, whose backward "
    "is differentiable when create_graph=True"
)


def reset_calls() -> None:
    """Zero :data:`CALLS`."""
    CALLS["forward"] = 0
    CALLS["backward"] = 0


def _forward(x, weight, residual, eps, offset, llama=False, out_dtype=None, keep_rstd=True):
    """``[..., N]`` tensors -> ``(y [..., N], h [..., N] or None, saved, saved_stride, rstd (M,))``.

    ``saved`` is the kernel's input (x's rows, or the returned x + residual) and ``saved_stride``
    its row stride: what the backward launch reads. ``llama``: Llama's rounding rule
    (:func:`ops.output_dtype`). ``out_dtype``: store y in this dtype instead of the rule's (the
    Inductor pass's cast rewrite; one rounding of the same accumulator values).
    ``keep_rstd=False``: no backward will run; rstd is neither allocated nor stored (None).
    """
    x_rows, sx = ops.rows_of(x, "x")
    res_rows, sr = (None, 0) if residual is None else ops.rows_of(residual, "residual")
    if out_dtype is None:
        out_dtype = ops.output_dtype(x, weight, llama)
    # Rows viewed or copied to 2-D: y and h are allocated in x's shape, not viewed to it, since
    # an autograd.Function's output that is a view of a tensor made inside it may not be
    # modified in place (y.mul_(2), y[0] = 0: what F.rms_norm's output allows), and a forward-AD
    # tangent cannot be attached to it.
    y, h, rstd = ops.launch_forward(
        x_rows,
        weight,
        res_rows,
        eps,
        offset,
        out_dtype,
        stride_x=sx,
        stride_res=sr,
        llama=llama,
        keep_rstd=keep_rstd,
        shape=None if x_rows is x else x.shape,
    )
    CALLS["forward"] += 1
    saved, saved_stride = (x_rows, sx) if h is None else (h, x.shape[-1])
    return y, h, saved, saved_stride, rstd


def _channels_last(x: torch.Tensor) -> torch.memory_format | None:
    """``torch.channels_last`` (4-D) / ``channels_last_3d`` (5-D) when ``x`` is laid out so and is
    not also contiguous; else None, and under a torch.func transform (which cannot be asked)."""
    if not isinstance(x, torch.Tensor):  # refused by the contract next, naming it
        return None
    dims = x.dim()
    if (dims != 4 and dims != 5) or torch._C._are_functorch_transforms_active():
        return None
    fmt = torch.channels_last if dims == 4 else torch.channels_last_3d
    return fmt if x.is_contiguous(memory_format=fmt) and not x.is_contiguous() else None


def _backward(
    dy,
    dh,
    saved,
    saved_stride,
    weight,
    rstd,
    offset,
    x_dtype,
    llama=False,
    parts=(),
    sum_dtype=None,
    dx2_dtype=None,
):
    """Upstream grads ``[..., N]`` -> ``(dx [..., N] like dy, dweight (N,) or None, dx2)``;
    ``parts``: more tensors of dy's shape and dtype, the upstream gradient being their sum with
    dy (rounded once to ``sum_dtype``, default dy's); ``dx2_dtype``: also dx rounded to this
    dtype, stored by the same kernel (else dx2 is None)."""
    dy_rows, sdy = ops.rows_of(dy, "dy")
    dh_rows, sdh = (None, 0) if dh is None else ops.rows_of(dh, "dy")
    dy_parts = tuple(ops.rows_of(p, "dy") for p in parts) if parts else ()
    dx2 = None
    if dx2_dtype is not None:
        dx2 = torch.empty(dy_rows.shape, device=dy.device, dtype=dx2_dtype)
    dx, dw = ops.launch_backward(
        dy_rows,
        saved,
        weight,
        rstd,
        offset,
        dh_rows,
        x_dtype,
        stride_dy=sdy,
        stride_x=saved_stride,
        stride_dh=sdh,
        llama=llama,
        dy_parts=dy_parts,
        dy_sum_dtype=sum_dtype,
        dx2_out=dx2,
    )
    CALLS["backward"] += 1
    if dy_rows is not dy:
        dx = dx.view(dy.shape)
        dx2 = None if dx2 is None else dx2.view(dy.shape)
    return dx, dw, dx2


class RMSNormFunction(torch.autograd.Function):
    """``apply(x, weight, eps, offset=0.0, residual=None, llama=False)`` -> ``y`` or
    ``(y, x + residual)``."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset=0.0, residual=None, llama=False):
        y, h, saved, saved_stride, rstd = _forward(x, weight, residual, eps, offset, llama)
        ctx.llama = llama
        # The kernel reads ``saved`` (x's rows); a graph through the backward needs x or the
        # returned h themselves (``saved`` may be a view or copy made here, unknown to autograd),
        # saved beside it only when it is another tensor (one fewer to pack in the common case).
        source = x if h is None else h
        if source is saved:
            ctx.save_for_backward(saved, weight, rstd)
        else:
            ctx.save_for_backward(saved, weight, rstd, source)
        ctx.eps = eps
        ctx.meta = (offset, saved_stride, x.dtype, residual is not None)
        if h is None:
            return y
        return y, h

    @staticmethod
    def backward(ctx, dy, dh=None):
        saved, weight, rstd, *source = ctx.saved_tensors
        source = source[0] if source else saved
        offset, saved_stride, x_dtype, has_residual = ctx.meta
        if ops_backward_needed(dy, dh, source, weight):  # create_graph=True, or batched grads
            dx, dw = differentiable_backward(
                dy, dh, source, weight, ctx.eps, offset, x_dtype, rstd.dtype, ctx.llama
            )
        elif type(dy) not in PLAIN_TENSORS or is_subclass(dh):
            # A tensor-subclass gradient (a wrapper may have no storage): the registered op,
            # which dispatches to it (it calls the op again on the plain tensors it holds).
            dx, dw, _ = torch.ops.rmsnorm_kernel.rmsnorm_bwd(
                dy, dh, source, weight, rstd, offset, ctx.llama
            )
            dw = dw if weight is not None else None
        else:
            dx, dw, _ = _backward(
                dy, dh, saved, saved_stride, weight, rstd, offset, x_dtype, ctx.llama
            )
        return dx, dw, None, None, (dx if has_residual else None), None


# ---------------------------------------------------------------------------------------------
# torch.library ops: what torch.compile sees. Outputs may not alias inputs, and optional outputs
# are empty tensors (shape (0,)) because a custom op must return tensors.


@torch.library.custom_op("rmsnorm_kernel::rmsnorm_fwd", mutates_args=())
def rmsnorm_fwd(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    residual: torch.Tensor | None,
    eps: float,
    offset: float,
    llama: bool = False,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns ``(y, h or empty, rstd (M,))``. ``out_dtype`` (None: the rounding rule's dtype)
    is set only by the Inductor pass, where the rule's dtype is the accumulator's and the graph
    cast y to a narrower one: the kernel then stores that dtype directly (the same one rounding
    of the same values)."""
    if out_dtype is not None and out_dtype not in SUPPORTED_DTYPES:
        raise ContractTypeError(
            f"out_dtype must be None or one of {SUPPORTED_DTYPES} (got {out_dtype})"
        )
    y, h, _, _, rstd = _forward(x, weight, residual, eps, offset, llama, out_dtype)
    return y, (x.new_empty(0) if h is None else h), rstd


@rmsnorm_fwd.register_fake
def _(x, weight, residual, eps, offset, llama=False, out_dtype=None):
    out = ops.output_dtype(x, weight, llama) if out_dtype is None else out_dtype
    m = x.numel() // x.shape[-1]
    y = x.new_empty(x.shape, dtype=out)
    h = x.new_empty(0) if residual is None else x.new_empty(x.shape)
    return y, h, x.new_empty((m,), dtype=ops._acc_dtype(x.dtype))


@torch.library.custom_op("rmsnorm_kernel::rmsnorm_bwd", mutates_args=())
def rmsnorm_bwd(
    dy: torch.Tensor,
    dh: torch.Tensor | None,
    saved: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    llama: bool = False,
    dy_b: torch.Tensor | None = None,
    dy_c: torch.Tensor | None = None,
    dy_dtype: torch.dtype | None = None,
    dx2_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns ``(dx [like dy's shape], dweight or empty, dx2 or empty)``; ``saved`` is the
    forward's input. The rest is set only by the Inductor pass. ``dy_b`` / ``dy_c`` /
    ``dy_dtype``: the upstream gradient is ``(dy + dy_b) + dy_c``, summed in the accumulator and
    rounded once to ``dy_dtype`` (default: the parts' dtype; a wider one under autocast, where
    the parts were widened before the sum) inside the kernel: what Inductor's fused add of those
    GEMM outputs stored. ``dx2_dtype``: dx (float32) also rounded to this narrower dtype, stored
    by the same kernel (dx2): what a cast of dx gives (the next GEMMs' input under autocast)."""
    parts = _dy_parts(dy, dy_b, dy_c, dy_dtype, saved.dtype)
    _check_dx2_dtype(dx2_dtype, saved.dtype)
    rows, stride = ops.rows_of(saved, "x")
    dx, dw, dx2 = _backward(
        dy, dh, rows, stride, weight, rstd, offset, saved.dtype, llama, parts, dy_dtype, dx2_dtype
    )
    # One empty tensor per absent output: a custom op's outputs may not alias each other
    # (torch.compile, jit.trace and direct op calls refuse a shared one).
    dw = saved.new_empty(0) if dw is None else dw
    return dx, dw, (saved.new_empty(0) if dx2 is None else dx2)


def _check_dx2_dtype(dx2_dtype, x_dtype) -> None:
    """``dx2_dtype``: None, or float16 / bfloat16 beside a float32 dx (the accumulator's own
    values, so the kernel's one rounding is the cast's)."""
    if dx2_dtype is None:
        return
    if x_dtype != torch.float32 or dx2_dtype not in (torch.float16, torch.bfloat16):
        raise ContractValueError(
            f"dx2_dtype must be float16 or bfloat16 beside a float32 x (got {dx2_dtype} with x "
            f"{x_dtype})"
        )


def _dy_parts(dy, dy_b, dy_c, dy_dtype, x_dtype) -> tuple[torch.Tensor, ...]:
    """The op's extra dy parts, checked: each of dy's shape, dtype and device, dy_c only after
    dy_b; ``dy_dtype`` only with parts, one that dy's dtype converts into exactly and whose
    sum Inductor computes in the kernel's accumulator (x's)."""
    if dy_c is not None and dy_b is None:
        raise ContractValueError("dy_c needs dy_b (the parts are dy, dy_b, dy_c in order)")
    parts = tuple(p for p in (dy_b, dy_c) if p is not None)
    for name, p in zip(("dy_b", "dy_c")[: len(parts)], parts, strict=True):
        if p.shape != dy.shape or p.dtype != dy.dtype or p.device != dy.device:
            raise ContractValueError(
                f"{name} must have dy's shape {tuple(dy.shape)}, dtype {dy.dtype} and device "
                f"{dy.device} (got {tuple(p.shape)}, {p.dtype}, {p.device})"
            )
    if dy_dtype is not None:
        if not parts:
            raise ContractValueError("dy_dtype is the dtype of a sum: it needs dy_b")
        exact = dy_dtype in SUPPORTED_DTYPES and torch.promote_types(dy.dtype, dy_dtype) == dy_dtype
        if not exact or ops._acc_dtype(dy_dtype) != ops._acc_dtype(x_dtype):
            raise ContractValueError(
                f"dy_dtype must be a dtype that dy's ({dy.dtype}) converts into exactly and that "
                f"is summed in x's accumulator, {ops._acc_dtype(x_dtype)} (got {dy_dtype})"
            )
    return parts


@rmsnorm_bwd.register_fake
def _(
    dy,
    dh,
    saved,
    weight,
    rstd,
    offset,
    llama=False,
    dy_b=None,
    dy_c=None,
    dy_dtype=None,
    dx2_dtype=None,
):
    _dy_parts(dy, dy_b, dy_c, dy_dtype, saved.dtype)
    _check_dx2_dtype(dx2_dtype, saved.dtype)
    dx = saved.new_empty(dy.shape)
    dw = saved.new_empty(0) if weight is None else torch.empty_like(weight)
    dx2 = saved.new_empty(0) if dx2_dtype is None else saved.new_empty(dy.shape, dtype=dx2_dtype)
    return dx, dw, dx2


def _fwd_setup_context(ctx, inputs, output):
    x, weight, residual, eps, offset, llama, _ = inputs
    y, h, rstd = output
    # The kernel's input: x itself, or the returned x + residual (already contiguous).
    saved = x if residual is None else h
    ctx.save_for_backward(saved, weight, rstd)
    ctx.offset = offset
    ctx.eps = eps
    ctx.llama = llama
    ctx.has_residual = residual is not None


def _fwd_backward(ctx, dy, dh, drstd):
    saved, weight, rstd = ctx.saved_tensors
    dh = dh if ctx.has_residual else None
    if ops_backward_needed(dy, dh, saved, weight):  # create_graph=True, or batched grads
        dx, dw = differentiable_backward(
            dy, dh, saved, weight, ctx.eps, ctx.offset, saved.dtype, rstd.dtype, ctx.llama
        )
    else:
        dx, dw, _ = torch.ops.rmsnorm_kernel.rmsnorm_bwd(
            dy, dh, saved, weight, rstd, ctx.offset, ctx.llama
        )
    dw = dw if weight is not None else None
    return dx, dw, (dx if ctx.has_residual else None), None, None, None, None


def _bwd_setup_context(ctx, inputs, output):
    pass


def _bwd_backward(ctx, *grads):
    raise RuntimeError(_DOUBLE_BACKWARD)


rmsnorm_fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)
rmsnorm_bwd.register_autograd(_bwd_backward, setup_context=_bwd_setup_context)


def _through_op(x: torch.Tensor, weight, residual) -> bool:
    """Calls that must go through the registered op, not the eager autograd.Function:

    - a meta tensor, or a fake one (a ``FakeTensorMode`` outside torch.compile: memory and shape
      estimators): no data to launch on, so the op's fake implementation answers;
    - another tensor subclass (:func:`.double_backward.is_subclass`; a ``__torch_dispatch__``
      wrapper may have no storage): the op dispatches to it, and it calls the op again on the
      plain tensors it holds;
    - ``torch.jit.trace``: the tracer records ops at the dispatcher; a Triton launch is invisible
      to it, so the traced graph would hold only the outputs' allocations (uninitialised memory
      for every later input; on CPU the interpreter fails on the traced tensors instead).
    """
    return (
        type(x) not in PLAIN_TENSORS  # (a FakeTensor too)
        or x.is_meta
        or (weight is not None and type(weight) not in PLAIN_TENSORS)
        or (residual is not None and type(residual) not in PLAIN_TENSORS)
        or torch.jit.is_tracing()
    )


def rmsnorm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float | None = 1e-6,
    *,
    offset: float = 0.0,
    residual: torch.Tensor | None = None,
    rounding: str = "torch",
):
    """RMSNorm over the last dim with the Triton kernels.

    Args:
        x: ``[..., N]``, float16 / bfloat16 / float32 / float64. A DTensor sharded over leading
            dims or replicated runs on each rank's local rows (:mod:`.dtensor`).
        weight: ``(N,)`` or ``None``; any of those dtypes, any stride (a view is read in place).
        eps: > 0; ``None`` means float32's machine epsilon (float64's for a float64 x), what
            ``torch.nn.RMSNorm(eps=None)`` adds (:func:`default_eps`).
        offset: scale by ``offset + weight`` (Gemma uses 1.0).
        residual: if given, normalise ``h = x + residual`` and also return h. Of x's dtype,
            or float32 beside a float16 / bfloat16 x (or 16-bit beside a float32 x): h is then
            float32, as ``x + residual`` is, and y is what ``rmsnorm(h, ...)`` returns; each
            input's gradient comes in its own dtype.
        rounding: ``"torch"`` (``F.rms_norm``: ``x * r * w`` in float32, rounded once to
            ``x.dtype``) or ``"llama"`` (Hugging Face's ``LlamaRMSNorm``: ``x * r`` rounded to
            ``x.dtype``, then times ``w`` in ``promote_types(w.dtype, x.dtype)``, the output
            dtype). Both are one forward launch; the backward is one launch (dweight
            finished in it: rows up to 1024 wide, past 2048 rows) or two (a fixed-order dweight
            sum after it).

    Returns:
        ``y`` (``[..., N]``; dtype ``x.dtype``, or the promoted dtype with ``rounding="llama"``),
        or ``(y, x + residual)`` when ``residual`` is given.
    """
    return _rmsnorm(x, weight, eps, offset, residual, rounding, True)


def default_eps(dtype: torch.dtype) -> float:
    """What ``eps=None`` means for a normalised tensor of ``dtype``: the machine epsilon of the
    type the norm is computed in, float32 (float64 for float64), as ``F.rms_norm`` computes it
    (``at::opmath_type``'s epsilon in ATen, ``_fused_rms_norm``'s decomposition alike). PyTorch's
    docs say ``torch.finfo(x.dtype).eps``, but for float16 / bfloat16 that would be 9.8e-4 /
    7.8e-3, far from the 1.2e-7 PyTorch adds: a bfloat16 row of std 0.02 would come out with an
    RMS of 0.22 instead of 1."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


def _rmsnorm(x, weight, eps, offset, residual, rounding, eps_positive, names=("x", "weight")):
    """:func:`rmsnorm`; ``eps_positive=False`` takes any finite eps (the drop-ins' rule, as
    ``F.rms_norm``: see :func:`contract.check_contract`); ``names``: what the errors call x and
    weight (a drop-in's own argument names, e.g. ``input``)."""
    if dtensor.involved(x, weight, residual):  # tensor / sequence parallel: each rank's rows

        def local(x, weight, residual):
            return _rmsnorm(x, weight, eps, offset, residual, rounding, eps_positive, names)

        return dtensor.local_call(local, x, weight, residual)
    if type(x) is not torch.Tensor and nested.is_jagged(x):  # the kernels run on its values

        def on_values(values, res_values):
            return _rmsnorm(values, weight, eps, offset, res_values, rounding, eps_positive, names)

        return nested.jagged_call(on_values, x, residual, names)
    # (x.dim() first: the one C call the common 2-D / 3-D case pays for this)
    if isinstance(x, torch.Tensor) and x.dim() >= 4 and (fmt := _channels_last(x)) is not None:
        return _channels_last_rmsnorm(
            x, weight, eps, offset, residual, rounding, eps_positive, fmt, names
        )
    eps_default = eps is None
    if eps_default and isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
        # (an integer x keeps eps=None: check_contract then names x's dtype, not finfo)
        dtype = x.dtype  # the normalised tensor's: x, or x + residual
        if isinstance(residual, torch.Tensor) and residual.dtype.is_floating_point:
            dtype = torch.promote_types(dtype, residual.dtype)
        eps = default_eps(dtype)
    check_contract(
        x,
        weight,
        eps,
        offset=offset,
        residual=residual,
        rounding=rounding,
        eps_positive=eps_positive,
        names=names,
    )
    if residual is not None and residual.dtype != x.dtype and residual.dtype == torch.float32:
        # h = x + residual is float32: the kernels store h in their x's dtype, so the float32
        # operand goes in as x (the add commutes bit for bit; both get the same gradient).
        x, residual = residual, x
    llama = rounding == "llama"
    if torch.compiler.is_compiling() or _through_op(x, weight, residual):
        if eps_default and torch.jit.is_tracing():
            # F.rms_norm's trace records eps=None and resolves it per call; the op takes a
            # float, so the trace keeps this one for inputs of every dtype.
            warnings.warn(
                f"rmsnorm_kernel: eps=None was resolved to {eps!r}, the machine epsilon for "
                f"{x.dtype} input; the traced graph keeps that value for inputs of any dtype "
                "(pass eps explicitly to trace a value of your choice)",
                torch.jit.TracerWarning,
                stacklevel=3,
            )
        if torch.onnx.is_in_onnx_export() or (
            torch.compiler.is_compiling() and transforms.needed(x, weight, residual)
        ):
            # The kernels' formula in PyTorch ops. ONNX: no Triton kernel exports. torch.compile
            # of a torch.func transform (compile(grad(f)), compile(jvp(f)), ...): Dynamo inlines
            # the transform, and neither a custom op nor an autograd.Function gets functorch's
            # rules there (torch 2.11-2.13: grad fails, jvp's tangent comes out zero), while
            # these ops get every transform; Inductor compiles them with the graph around them.
            return export_formula(x, weight, float(eps), float(offset), residual, llama)
        if not torch.compiler.is_compiling() and transforms.needed(x, weight, residual):
            # A subclass (or fake / meta) input with a forward-AD tangent or under torch.func:
            # the op alone has no jvp (the tangent would be dropped); the transforms' Function
            # has one, and its forward calls the op for such inputs.
            return transforms.FuncRMSNormFunction.apply(
                x, weight, float(eps), float(offset), residual, llama
            )
        y, h, _ = torch.ops.rmsnorm_kernel.rmsnorm_fwd(
            x, weight, residual, float(eps), float(offset), llama
        )
        return y if residual is None else (y, h)
    if transforms.needed(x, weight, residual):  # torch.func, or forward-mode AD tangents
        return transforms.FuncRMSNormFunction.apply(
            x, weight, float(eps), float(offset), residual, llama
        )
    # A tensor kept from inside a finished torch.func transform (a "dead" wrapper: one a hook or
    # a closure stored) has no storage of its own: the kernels read the tensor it wraps, as
    # F.rms_norm's dispatch and autograd.Function.apply do.
    x = _unwrap_if_dead(x)
    if weight is not None:
        weight = _unwrap_if_dead(weight)
    if residual is not None:
        residual = _unwrap_if_dead(residual)
    if not torch.is_grad_enabled() or not (
        x.requires_grad
        or (weight is not None and weight.requires_grad)
        or (residual is not None and residual.requires_grad)
    ):
        # Nothing to differentiate: skip autograd.Function's bookkeeping (inference hot path).
        y, h, _, _, _ = _forward(
            x, weight, residual, float(eps), float(offset), llama, keep_rstd=False
        )
        return y if residual is None else (y, h)
    if x.is_inference() or _is_inference(weight) or _is_inference(residual):
        # A tensor made under torch.inference_mode cannot be saved for backward, yet a weight
        # (or residual) that requires grad needs x's values, as F.rms_norm's graph saves them:
        # normal copies are saved instead (an extra copy for these tensors only).
        x, weight, residual = (_normal(t) for t in (x, weight, residual))
    return _apply(x, weight, float(eps), float(offset), residual, llama)


_unwrap_if_dead = torch._C._functorch.unwrap_if_dead
#: ``RMSNormFunction.apply`` without ``torch.autograd.Function.apply``'s Python layer (torch
#: 2.11-2.13). With no torch.func transform active (``transforms.needed`` is asked first) and no
#: ``setup_context``, that layer only unwraps dead functorch wrappers (done in ``_rmsnorm``, for
#: the no-grad path too) and calls this C apply: 21.5 against 27.6 us a call on the CI CPU,
#: launches stubbed (the whole forward 38.9 -> ~33).
_apply = super(torch.autograd.Function, RMSNormFunction).apply


def contiguous_keeping_grad_layout(x: torch.Tensor, fmt: torch.memory_format) -> torch.Tensor:
    """``x.contiguous()`` whose gradient comes back in ``fmt``. Under torch.compile a plain
    ``x.contiguous()`` (Dynamo does not trace an ``autograd.Function`` with a jvp; Inductor
    picks the gradient's layout)."""
    if torch.compiler.is_compiling():
        return x.contiguous()
    return ContiguousKeepingGradLayout.apply(x, fmt)


class ContiguousKeepingGradLayout(torch.autograd.Function):
    """``apply(x, memory_format)`` -> ``x.contiguous()``, whose gradient comes back in
    ``memory_format`` (a channels-last input's gradient keeps its layout, as F.rms_norm's does)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, memory_format):
        return x.contiguous()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.memory_format = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous(memory_format=ctx.memory_format), None

    @staticmethod
    def jvp(ctx, x_t, _):
        return x_t.contiguous()


def _channels_last_rmsnorm(x, weight, eps, offset, residual, rounding, eps_positive, fmt, names):
    """F.rms_norm keeps a channels-last input's layout in its output and its input's gradient
    (empty_like(x) in x's suggested memory format); the kernels read and write rows: x is copied
    to rows (as it would be anyway), and y and dx are copied back to that layout, in this case
    only and outside the op (whose outputs are contiguous, as its fake says)."""
    x = contiguous_keeping_grad_layout(x, fmt)
    if residual is not None and _channels_last(residual) is not None:
        residual = contiguous_keeping_grad_layout(residual, fmt)
    out = _rmsnorm(x, weight, eps, offset, residual, rounding, eps_positive, names)
    if isinstance(out, tuple):
        return tuple(t.contiguous(memory_format=fmt) for t in out)
    return out.contiguous(memory_format=fmt)


def _is_inference(t: torch.Tensor | None) -> bool:
    return t is not None and t.is_inference()


def _normal(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t``, or a normal (non-inference) copy of it where ``t`` is an inference tensor."""
    return t.clone() if _is_inference(t) else t

"""flash-attention's Triton RMSNorm API on this package's kernels: swap the import, keep the calls.

``from rmsnorm_kernel.integrations.flash_attn import RMSNorm, rms_norm_fn`` stands in for
``flash_attn.ops.triton.layer_norm.RMSNorm`` / ``rms_norm_fn`` (and ``layer_norm_fn`` with
``is_rms_norm=True``, which flash-attn computes as ``rms_norm_fn``; ``layer_norm_linear_fn``, the
norm then a linear) (signatures and defaults of flash-attention's main branch; flash-attn itself
is never imported). flash-attn's PyTorch references ``rms_norm_ref`` / ``layer_norm_ref``, which
its tests import from the same module, are here too (:mod:`.flash_attn_ref`).

What flash-attn computes (``_layer_norm_fwd`` / ``_layer_norm_fwd_1pass_kernel`` with
``IS_RMS_NORM``), all in float32:

    h = x + residual                      # float32; stored as residual_out (below)
    y = h * rsqrt(mean(h**2) + eps) * (weight + 1 if zero_centered_weight else weight)

``y`` is stored once in ``out_dtype`` (default x's dtype; an ``out`` tensor's dtype when one is
given), whatever the weight's dtype. ``residual_out`` (returned with ``prenorm=True``) has the
residual's dtype when a residual is given; without one, float32 if ``residual_in_fp32`` and x is
not float32 (``x`` converted), else ``x`` itself. ``residual_in_fp32`` matters only when
``residual`` is None (flash-attn: ``residual_dtype = residual.dtype if residual is not None else
(torch.float32 if residual_in_fp32 else None)``). Here: ``rmsnorm(x, weight, eps, offset=...,
residual=...)`` (float32 math, one rounding of y), with casts where the requested dtypes differ
from the kernel's (a float32 y or h rounded once, as flash-attn's store rounds it; a 16-bit
operand is widened first wherever a 16-bit intermediate would lose what flash-attn keeps).

Supported: ``bias=None``, ``residual`` (any float dtypes beside x), ``prenorm``,
``residual_in_fp32``, ``zero_centered_weight`` (offset 1), ``out_dtype``, ``out`` (y is written
into it and it is returned), ``residual_out`` (h is written into it and it is returned),
``return_dropout_mask`` (with ``dropout_p == 0`` flash-attn's masks are ``None``: so are they
here). Refused before any computation, naming the argument (:class:`UnsupportedArgumentError`,
a ``NotImplementedError`` and a ``ValueError``): a bias, ``dropout_p > 0``, ``rowscale``, ``x1``,
``weight1``, ``bias1``; ``ValueError`` / ``TypeError`` for values neither library takes.

Where this differs from flash-attn:

- With a residual of x's 16-bit dtype, y normalises ``h`` rounded to that dtype (the
  ``residual_out`` the caller receives, as flash-attn's own reference ``rms_norm_ref`` does),
  where flash-attn's kernel normalises the float32 sum before rounding it: a difference within
  one rounding of h. With a float32 residual (the ``residual_in_fp32`` stream) they agree.
- A caller's ``residual_out`` tensor: flash-attn's ``_layer_norm_fwd`` drops it (its ``else:
  residual_out = None`` branch) and returns x; here h is written into it, as the op's schema
  (``Tensor(a!)? residual_out``) declares.
- ``out`` together with an ``out_dtype`` other than ``out.dtype``: flash-attn silently uses
  ``out.dtype``; refused here.
- float64 inputs: flash-attn computes in float32; here in float64.
- ``RMSNorm(dropout_p > 0)`` works in eval mode (no dropout, as flash-attn) and raises in
  training mode, where flash-attn would apply dropout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..contract import SUPPORTED_DTYPES, ContractTypeError, ContractValueError, check_real
from ..function import _rmsnorm
from .flash_attn_ref import layer_norm_ref, rms_norm_ref

__all__ = [
    "RMSNorm",
    "UnsupportedArgumentError",
    "layer_norm_fn",
    "layer_norm_linear_fn",
    "layer_norm_ref",
    "rms_norm_fn",
    "rms_norm_ref",
]

_HALF = (torch.float16, torch.bfloat16)


class UnsupportedArgumentError(NotImplementedError, ValueError):
    """An argument flash-attn supports and this drop-in does not (dropout, rowscale, a bias, the
    parallel ``x1`` / ``weight1`` / ``bias1`` norm). Both a ``NotImplementedError`` and a
    ``ValueError``."""


def _check_buffer(name: str, buf, x: torch.Tensor) -> None:
    if not isinstance(buf, torch.Tensor):
        raise ContractTypeError(f"{name} must be a torch.Tensor or None (got {type(buf).__name__})")
    if buf.shape != x.shape or buf.device != x.device or buf.dtype not in SUPPORTED_DTYPES:
        raise ContractValueError(
            f"{name} must have x's shape {tuple(x.shape)} and device {x.device} and a dtype in "
            f"{SUPPORTED_DTYPES} (got {tuple(buf.shape)}, {buf.device}, {buf.dtype})"
        )
    # What the copy into it would refuse, refused before anything is computed or written (the
    # copy of y into out comes before that of h into residual_out).
    if torch.is_grad_enabled() and buf.requires_grad and buf.is_leaf:
        raise ContractValueError(
            f"{name} must not be a leaf tensor that requires grad: writing into it is an in-place "
            "operation autograd refuses (pass a buffer without requires_grad)"
        )
    if buf.is_inference() and not torch.is_inference_mode_enabled():
        raise ContractValueError(
            f"{name} must not be a tensor made under torch.inference_mode when called outside it"
        )
    if any(stride == 0 and size > 1 for size, stride in zip(buf.shape, buf.stride(), strict=True)):
        raise ContractValueError(
            f"{name} must not repeat memory (stride 0, e.g. an expand: strides "
            f"{tuple(buf.stride())}): its elements would share one memory location"
        )


def _check(
    x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale,
    out_dtype, out, residual_out, prenorm,
) -> None:  # fmt: skip
    """Every refusal, before anything is computed (the kernel's contract checks the rest)."""
    for name, value in (("bias", bias), ("x1", x1), ("weight1", weight1), ("bias1", bias1)):
        if value is not None:
            raise UnsupportedArgumentError(
                f"{name} is not supported by rmsnorm_kernel's rms_norm_fn (got a "
                f"{type(value).__name__}; it must be None)"
            )
    if rowscale is not None:
        raise UnsupportedArgumentError("rowscale is not supported by rms_norm_fn: it must be None")
    p = check_real("dropout_p", dropout_p)
    if p > 0.0:
        raise UnsupportedArgumentError(
            f"dropout_p > 0 is not supported by rms_norm_fn (got {dropout_p!r}): it must be 0.0"
        )
    if p < 0.0:
        raise ContractValueError(f"dropout_p must be 0.0 (got {dropout_p!r})")
    check_real("eps", eps)
    if not isinstance(x, torch.Tensor):
        raise ContractTypeError(f"x must be a torch.Tensor (got {type(x).__name__})")
    if weight is None:
        raise ContractTypeError("weight is required by rms_norm_fn (got None)")
    if residual is not None:
        if not isinstance(residual, torch.Tensor):
            raise ContractTypeError(
                f"residual must be a torch.Tensor or None (got {type(residual).__name__})"
            )
        if residual.dtype not in SUPPORTED_DTYPES:
            raise ContractTypeError(
                f"residual must have a dtype in {SUPPORTED_DTYPES} (got {residual.dtype})"
            )
    if out_dtype is not None and out_dtype not in SUPPORTED_DTYPES:
        raise ContractTypeError(
            f"out_dtype must be None or one of {SUPPORTED_DTYPES} (got {out_dtype!r})"
        )
    if out is not None:
        _check_buffer("out", out, x)
        if out_dtype is not None and out_dtype != out.dtype:
            raise ContractValueError(
                f"out_dtype {out_dtype} contradicts out's dtype {out.dtype}: pass one of them"
            )
    if residual_out is not None:
        _check_buffer("residual_out", residual_out, x)
    # y is copied into out, then h into residual_out: buffers sharing memory would overwrite
    # one result with the other (and h is x itself where no residual is added).
    if out is not None and residual_out is not None and _overlap(out, residual_out):
        raise ContractValueError("out and residual_out must not share memory: y would be lost")
    h_is_x = residual is None and (prenorm or residual_out is not None)
    if out is not None and h_is_x and _overlap(out, x):
        raise ContractValueError(
            "out must not share memory with x when residual is None and prenorm=True or "
            "residual_out is given: the residual returned is x itself, which writing y into out "
            "would overwrite"
        )


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte ranges ``a`` and ``b`` span in one storage intersect (conservative:
    interleaved strided views count as sharing)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False

    def span(t):
        start = t.data_ptr()
        last = sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True) if st > 0)
        return start, start + (last + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _operands(x, residual, y_dtype, h_dtype):
    """``(a, b)`` for ``rmsnorm(a, residual=b)``: pairs the kernel takes (one dtype, or a
    16-bit one beside float32), with a 16-bit operand widened where its 16-bit h or y would lose
    what flash-attn's float32 keeps (every widening is exact)."""
    a, b = x, residual
    pair = {a.dtype, b.dtype}
    if len(pair) == 2 and not (torch.float32 in pair and pair & set(_HALF)):
        wide = torch.float64 if torch.float64 in pair else torch.float32
        a, b = a.to(wide), b.to(wide)
    h = torch.promote_types(a.dtype, b.dtype)
    if h in _HALF and (y_dtype != h or h_dtype != h):
        b = b.float()  # 16-bit a beside float32 b: h and y in float32
    return a, b


def rms_norm_fn(
    x,
    weight,
    bias,
    residual=None,
    x1=None,
    weight1=None,
    bias1=None,
    eps=1e-6,
    dropout_p=0.0,
    rowscale=None,
    prenorm=False,
    residual_in_fp32=False,
    zero_centered_weight=False,
    return_dropout_mask=False,
    out_dtype=None,
    out=None,
    residual_out=None,
):
    """``flash_attn.ops.triton.layer_norm.rms_norm_fn`` (module docstring: what is supported).

    Returns ``y``; ``(y, residual_out)`` with ``prenorm``; ``return_dropout_mask`` appends
    flash-attn's two dropout masks, both ``None`` (no dropout).
    """
    _check(
        x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale,
        out_dtype, out, residual_out, prenorm,
    )  # fmt: skip
    eps = float(eps)
    offset = 1.0 if zero_centered_weight else 0.0
    y_dtype = out.dtype if out is not None else (x.dtype if out_dtype is None else out_dtype)
    if residual_out is not None:
        h_dtype = residual_out.dtype
    elif residual is not None:
        h_dtype = residual.dtype
    else:
        h_dtype = torch.float32 if residual_in_fp32 else x.dtype
    if residual is None:
        a = x.float() if (y_dtype != x.dtype and x.dtype in _HALF) else x
        y = _rmsnorm(a, weight, eps, offset, None, "torch", False)
        h = None
        if prenorm or residual_out is not None:  # flash-attn: x itself unless widened
            h = x if h_dtype == x.dtype else x.to(h_dtype)
    else:
        a, b = _operands(x, residual, y_dtype, h_dtype)
        y, h = _rmsnorm(a, weight, eps, offset, b, "torch", False)
        h = h if h.dtype == h_dtype else h.to(h_dtype)
    y = y if y.dtype == y_dtype else y.to(y_dtype)
    if out is not None:
        out.copy_(y)
        y = out
    if residual_out is not None:
        residual_out.copy_(h)
        h = residual_out
    outputs = (y, h) if prenorm else (y,)
    if return_dropout_mask:
        outputs = (*outputs, None, None)
    return outputs[0] if len(outputs) == 1 else outputs


def layer_norm_fn(
    x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6, dropout_p=0.0,
    rowscale=None, prenorm=False, residual_in_fp32=False, zero_centered_weight=False,
    is_rms_norm=False, return_dropout_mask=False, out_dtype=None, out=None, residual_out=None,
):  # fmt: skip
    """``flash_attn.ops.triton.layer_norm.layer_norm_fn``: with ``is_rms_norm=True`` it is
    :func:`rms_norm_fn` (as in flash-attn); LayerNorm (``is_rms_norm=False``, flash-attn's
    default) is not this package's and is refused."""
    if not is_rms_norm:  # any true value, as flash-attn's kernel flag
        raise UnsupportedArgumentError(
            f"layer_norm_fn computes RMSNorm only here: is_rms_norm must be True (got "
            f"{is_rms_norm!r}); LayerNorm is not supported by rmsnorm_kernel"
        )
    return rms_norm_fn(
        x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm,
        residual_in_fp32, zero_centered_weight, return_dropout_mask, out_dtype, out, residual_out,
    )  # fmt: skip


def layer_norm_linear_fn(
    x, norm_weight, norm_bias, linear_weight, linear_bias, residual=None, eps=1e-6,
    prenorm=False, residual_in_fp32=False, is_rms_norm=False,
):  # fmt: skip
    """``flash_attn.ops.triton.layer_norm.layer_norm_linear_fn`` with ``is_rms_norm=True``: the
    norm (:func:`rms_norm_fn`), then ``F.linear``; ``out`` or, with ``prenorm``,
    ``(out, residual_out)``.

    As in flash-attn, under autocast (of x's device type here; flash-attn reads CUDA's) the norm
    stores y in the autocast dtype and the linear weight and bias are cast to it; otherwise
    they are cast to y's dtype (x's). Differentiable in x, residual, both weights and the bias
    through autograd (flash-attn recomputes y in its backward instead of keeping it: the same
    gradients, one activation of memory more here). ``norm_bias`` (LayerNorm's) and
    ``is_rms_norm=False`` are refused.
    """
    if not is_rms_norm:  # any true value, as flash-attn's kernel flag
        raise UnsupportedArgumentError(
            f"layer_norm_linear_fn computes RMSNorm only here: is_rms_norm must be True (got "
            f"{is_rms_norm!r}); LayerNorm is not supported by rmsnorm_kernel"
        )
    if norm_bias is not None:
        raise UnsupportedArgumentError(
            "norm_bias is not supported by rmsnorm_kernel's layer_norm_linear_fn (RMSNorm has "
            "none): it must be None"
        )
    _check_linear(x, norm_weight, linear_weight, linear_bias)
    device_type = x.device.type
    autocast = torch.is_autocast_enabled(device_type)
    y, residual_out = rms_norm_fn(
        x, norm_weight, None, residual, eps=eps, prenorm=True, residual_in_fp32=residual_in_fp32,
        out_dtype=torch.get_autocast_dtype(device_type) if autocast else None,
    )  # fmt: skip
    weight = linear_weight.to(y.dtype)
    bias = None if linear_bias is None else linear_bias.to(y.dtype)
    out = F.linear(y, weight, bias)
    return (out, residual_out) if prenorm else out


def _check_linear(x, norm_weight, linear_weight, linear_bias) -> None:
    """``norm_weight`` ``(N,)``, ``linear_weight`` ``(out_features, N)`` and ``linear_bias`` None
    or ``(out_features,)``: floating tensors on x's device, refused before the norm runs."""
    if not isinstance(x, torch.Tensor):
        raise ContractTypeError(f"x must be a torch.Tensor (got {type(x).__name__})")
    if x.dim() < 1:
        raise ContractValueError(
            f"x must have at least 1 dim [..., N] (got shape {tuple(x.shape)})"
        )
    n = x.shape[-1]
    for name, t in (
        ("norm_weight", norm_weight),
        ("linear_weight", linear_weight),
        ("linear_bias", linear_bias),
    ):
        if t is None and name == "linear_bias":
            continue
        if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
            what = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise ContractTypeError(f"{name} must be a floating torch.Tensor (got {what})")
        if t.device != x.device:
            raise ContractValueError(f"{name} must be on x's device {x.device} (got {t.device})")
    if tuple(norm_weight.shape) != (n,):
        raise ContractValueError(
            f"norm_weight must have shape (N,) = ({n},) (got {tuple(norm_weight.shape)})"
        )
    if linear_weight.dim() != 2 or linear_weight.shape[1] != n:
        raise ContractValueError(
            f"linear_weight must have shape (out_features, {n}), x's last dim second (got "
            f"{tuple(linear_weight.shape)})"
        )
    if linear_bias is not None and tuple(linear_bias.shape) != (linear_weight.shape[0],):
        raise ContractValueError(
            f"linear_bias must have shape ({linear_weight.shape[0]},), linear_weight's "
            f"out_features (got {tuple(linear_bias.shape)})"
        )


class RMSNorm(torch.nn.Module):
    """``flash_attn.ops.triton.layer_norm.RMSNorm`` on this package's kernels.

    Args (flash-attn's, with its defaults): ``hidden_size``, ``eps=1e-5``, ``dropout_p=0.0``
    (kept as ``self.drop``, an ``nn.Dropout`` or None, as flash-attn; > 0 raises in training
    mode), ``zero_centered_weight`` (the weight starts at zeros and scales by ``1 + weight``),
    ``device``, ``dtype``. Attributes ``eps``, ``drop``, ``zero_centered_weight``, ``weight``,
    ``bias`` (None); ``state_dict`` key ``weight``.
    """

    def __init__(
        self,
        hidden_size,
        eps=1e-5,
        dropout_p=0.0,
        zero_centered_weight=False,
        device=None,
        dtype=None,
    ):
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        self.eps = eps
        if dropout_p > 0.0:
            self.drop = torch.nn.Dropout(dropout_p)
        else:
            self.drop = None
        self.zero_centered_weight = zero_centered_weight
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, **factory_kwargs))
        self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if not self.zero_centered_weight:
            torch.nn.init.ones_(self.weight)
        else:
            torch.nn.init.zeros_(self.weight)

    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        return rms_norm_fn(
            x,
            self.weight,
            self.bias,
            residual=residual,
            eps=self.eps,
            dropout_p=self.drop.p if self.drop is not None and self.training else 0.0,
            prenorm=prenorm,
            residual_in_fp32=residual_in_fp32,
            zero_centered_weight=self.zero_centered_weight,
        )

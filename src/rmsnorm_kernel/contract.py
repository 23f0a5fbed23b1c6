"""Every rule the kernels rely on, checked before any output is allocated.

Errors are ``ContractValueError`` / ``ContractTypeError``: subclasses of ``ValueError`` /
``TypeError`` and also of ``RuntimeError`` (what PyTorch's own RMSNorm raises).

One place to read what is supported and what is refused. Each error names the argument, the rule
and what was received, e.g. ``"weight must have shape (N,) = (257,) (got (256,))"``.

Supported:
- ``x``: ``[..., N]``, any number of leading dims (``M`` = their product, ``M = 0`` allowed),
  dtype float16 / bfloat16 / float32 / float64. Rows may have any row stride when the last dim is
  contiguous (read in place, no copy). A last dim with stride != 1, or leading dims that cannot be
  flattened into one row stride, is copied once with ``.contiguous()`` -- documented, and counted
  in ``rmsnorm_kernel.COPIES``.
- ``weight``: ``None`` or shape ``(N,)``, any of the four dtypes (it may differ from ``x``'s), same
  device as ``x``, any stride (a step slice, a matrix column, ``expand``: read in place with its
  own stride). Output dtype is ``x.dtype`` (``F.rms_norm``'s rule); the weight gradient has
  ``weight.dtype``.
- ``rounding``: ``"torch"`` (the default, above) or ``"llama"``: ``x * r`` is rounded to
  ``x.dtype`` before the weight, and the output has ``promote_types(weight.dtype, x.dtype)``.
  With ``"llama"``, a float64 weight needs a float64 ``x`` (the product would need float64 math
  beside float32 normalisation: the kernels have one math dtype).
- ``residual``: ``None`` or the same shape, dtype and device as ``x``.
- ``eps``: a finite real number > 0 (``bool`` is refused). ``offset``: a finite real number.
  Both must fit in float32 (``|value| <= 3.4e38``). With ``eps_positive=False`` (the drop-ins
  ``rms_norm`` / ``RMSNorm``, whose model ``F.rms_norm`` takes any eps) ``eps <= 0`` is allowed
  too: a row whose mean square does not exceed ``-eps`` then comes out NaN or inf, as there.
- ``1 <= N <= MAX_N``. Math is float32 (float64 when ``x`` is float64).
"""

from __future__ import annotations

import math
import numbers

import torch

from .backend import BACKEND

#: The tutorial's N limit (one row in one block of registers); kept for its 72-case grid.
TUTORIAL_MAX_N = 4096
#: Largest N: rows above the one-pass width are processed in chunks, so this bounds testing, not
#: registers. Tested to 262144 on the GPU; beyond 2**20 nothing has been measured.
MAX_N = 1 << 20
#: eps and offset reach the kernels as float32 pairs (see ops.split_float).
FLOAT32_MAX = 3.4028234663852886e38
#: float32's smallest normal value: the least eps > 0 the rule takes. The kernels add eps in
#: float32, where a smaller positive eps is 0 or subnormal (which GPU math may flush to 0): a row
#: of zeros would then come out NaN though eps > 0 was asked for.
FLOAT32_TINY = 1.1754943508222875e-38
#: The rounding rules (see ``rmsnorm``'s ``rounding``).
ROUNDINGS = ("torch", "llama")


class ContractValueError(ValueError, RuntimeError):
    """A value the kernels cannot take. Also a ``RuntimeError``, which is what PyTorch's own
    ``F.rms_norm`` / ``nn.RMSNorm`` raise, so code written against them keeps catching it."""


class ContractTypeError(TypeError, RuntimeError):
    """A type the kernels cannot take (see :class:`ContractValueError` for the base classes)."""


SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DTYPE_NAMES = "float16, bfloat16, float32, float64"


def shown(value: object) -> str:
    """``value`` for an error message: a tensor by its shape and dtype (its repr would print every
    element, and is what a swapped argument, e.g. a weight passed as eps, would show), anything
    else by its type and repr, cut at 80 characters."""
    if isinstance(value, torch.Tensor):
        return f"Tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def _check_real(name: str, value: object, *, positive: bool) -> None:
    if (
        type(value) is float
        and -FLOAT32_MAX <= value <= FLOAT32_MAX
        and (value >= FLOAT32_TINY or not positive)
    ):
        return  # the hot path: a plain, valid Python float
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ContractTypeError(f"{name} must be a real number (got {shown(value)})")
    if not math.isfinite(float(value)):
        raise ContractValueError(f"{name} must be finite (got {value!r})")
    if abs(float(value)) > FLOAT32_MAX:
        raise ContractValueError(
            f"{name} must fit in float32, |{name}| <= {FLOAT32_MAX:.4g} (got {value!r})"
        )
    if positive and not float(value) > 0:
        raise ContractValueError(f"{name} must be > 0 (got {value!r})")
    if positive and not float(value) >= FLOAT32_TINY:
        raise ContractValueError(
            f"{name} must be >= {FLOAT32_TINY:.5g}, float32's smallest normal value (got "
            f"{value!r}): the kernels add {name} in float32, where it would be 0 or subnormal"
        )


def check_real(name: str, value: object, *, positive: bool = False) -> float:
    """``float(value)`` for a finite real (not a bool) that fits in float32 (and is > 0 where
    ``positive``); else :class:`ContractTypeError` / :class:`ContractValueError` naming ``name``.
    The one scalar check of this package, shared by the peer-API drop-ins."""
    _check_real(name, value, positive=positive)
    return float(value)


def check_normalized_shape(value: object) -> tuple[int, ...]:
    """``normalized_shape`` as ``torch.nn.functional.rms_norm`` takes it: an int, or a list /
    tuple / ``torch.Size`` of ints (``torch.SymInt`` under tracing; not bools), each >= 0.
    Returns the tuple; anything else is a :class:`ContractTypeError` (a negative size a
    :class:`ContractValueError`; torch's own ``RMSNorm(-3)`` fails creating its weight) naming
    the argument."""

    def is_int(d: object) -> bool:
        return isinstance(d, (numbers.Integral, torch.SymInt)) and not isinstance(d, bool)

    if is_int(value):
        shape = (int(value),)
    elif isinstance(value, (list, tuple)) and all(is_int(d) for d in value):
        shape = tuple(int(d) for d in value)
    else:
        raise ContractTypeError(
            "normalized_shape must be an int or a list / tuple / torch.Size of ints (got "
            f"{shown(value)})"
        )
    if any(d < 0 for d in shape):
        raise ContractValueError(f"normalized_shape must hold sizes >= 0 (got {shape})")
    return shape


def _check_layout(name: str, t: torch.Tensor) -> None:
    if t.layout is not _STRIDED:  # sparse, mkldnn: the kernels read strided memory only
        raise ContractTypeError(
            f"{name} must be a dense (strided) tensor (got layout {t.layout}); convert it with "
            ".to_dense()"
        )


def _check_dtype(name: str, t: torch.Tensor) -> None:
    _check_layout(name, t)
    if t.dtype not in SUPPORTED_DTYPES:
        raise ContractTypeError(f"{name} must have dtype in ({_DTYPE_NAMES}) (got {t.dtype})")


_STRIDED = torch.strided


def check_no_columns(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float | None,
    names: tuple[str, str] = ("x", "weight"),
) -> None:
    """The drop-ins' rules for rows of N = 0 values, which ``F.rms_norm`` returns empty (nothing
    is launched): x and weight of supported dtypes, the weight on x's device, eps None or a
    finite real. The caller checked the shapes. ``names``: what the messages call x and
    weight."""
    xn, wn = names
    _check_dtype(xn, x)
    if weight is not None:
        _check_dtype(wn, weight)
        if weight.device != x.device:
            raise ContractValueError(
                f"{wn} must be on {xn}'s device {x.device} (got {weight.device})"
            )
    if eps is not None:
        _check_real("eps", eps, positive=False)


def _check_device(x: torch.Tensor, name: str = "x") -> None:
    if x.device.type == "meta":  # shapes only (function._through_op): nothing is launched
        return
    if BACKEND == "cuda" and x.device.type != "cuda":
        raise ContractValueError(
            f"{name} must be on a CUDA device: kernels are compiled for the GPU "
            f"(got device {x.device}); "
            "move it with .cuda() or set TRITON_INTERPRET=1 before importing rmsnorm_kernel"
        )
    if x.device.type not in ("cuda", "cpu"):
        raise ContractValueError(f"{name} must be on a cpu, cuda or meta device (got {x.device})")


_DTYPE_SET = frozenset(SUPPORTED_DTYPES)
_COMPILED = BACKEND == "cuda"


#: Residual dtypes beside x's that the kernels take: one 16-bit and one float32 (the float32
#: residual stream of mixed precision training). ``x + residual`` is then float32, which the
#: kernels compute exactly as the add does (both convert exactly into float32).
_MIXED_RESIDUAL = frozenset(
    (a, b)
    for half in (torch.float16, torch.bfloat16)
    for a, b in ((half, torch.float32), (torch.float32, half))
)


def _common_case_ok(x, weight, eps, offset, residual, rounding) -> bool:
    """True for the common valid call, decided with a few cheap attribute reads: a supported
    tensor on the kernels' device, a matching weight or none, float eps > 0, float offset, a
    residual like x (or its float32 / 16-bit partner) or none, either rounding (Llama's with a
    float64 weight only for float64 x). Anything else (valid or not) goes through the full
    checks and their messages."""
    if (
        type(eps) is not float
        or not FLOAT32_TINY <= eps <= FLOAT32_MAX
        or type(offset) is not float
        or not -FLOAT32_MAX <= offset <= FLOAT32_MAX
        or not isinstance(x, torch.Tensor)
        or x.dtype not in _DTYPE_SET
        or x.layout is not _STRIDED
        or x.dim() < 1
        or not 1 <= x.shape[-1] <= MAX_N
        or not (x.is_cuda if _COMPILED else x.is_cpu)
    ):
        return False
    if residual is not None and not (
        type(residual) is torch.Tensor
        and residual.layout is _STRIDED
        and (residual.dtype == x.dtype or (x.dtype, residual.dtype) in _MIXED_RESIDUAL)
        and residual.shape == x.shape
        and residual.device == x.device
    ):
        return False
    if weight is None:
        return offset == 0.0
    return (
        isinstance(weight, torch.Tensor)
        and weight.dtype in _DTYPE_SET
        and weight.layout is _STRIDED
        and weight.dim() == 1
        and weight.shape[0] == x.shape[-1]
        and (
            weight.is_cuda and weight.get_device() == x.get_device() if _COMPILED else weight.is_cpu
        )
        and not (rounding == "llama" and weight.dtype == torch.float64 and x.dtype != torch.float64)
    )


def check_contract(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    offset: float = 0.0,
    residual: torch.Tensor | None = None,
    rounding: str = "torch",
    eps_positive: bool = True,
    names: tuple[str, str] = ("x", "weight"),
) -> None:
    """Raise ``TypeError``/``ValueError`` if the arguments break a rule the kernels rely on.

    ``eps_positive=False``: any finite eps, ``F.rms_norm``'s domain (the drop-ins' rule).
    ``names``: what the messages call x and weight (a drop-in's own argument names)."""
    if (rounding == "torch" or rounding == "llama") and _common_case_ok(
        x, weight, eps, offset, residual, rounding
    ):
        return
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ContractValueError(f"rounding must be one of {ROUNDINGS} (got {rounding!r})")
    xn, wn = names
    if not isinstance(x, torch.Tensor):
        raise ContractTypeError(f"{xn} must be a torch.Tensor (got {type(x).__name__})")
    _check_dtype(xn, x)
    if x.dim() < 1:
        raise ContractValueError(
            f"{xn} must have at least 1 dim [..., N] (got shape {tuple(x.shape)})"
        )
    n = x.shape[-1]
    if not 1 <= n <= MAX_N:
        raise ContractValueError(f"{xn}'s last dim N must satisfy 1 <= N <= {MAX_N} (got N={n})")
    _check_device(x, xn)
    if weight is not None and not isinstance(weight, torch.Tensor):
        # before eps: rmsnorm(x, (N,), w) (F.rms_norm's order) is a weight mistake first
        raise ContractTypeError(f"{wn} must be a torch.Tensor or None (got {shown(weight)})")
    _check_real("eps", eps, positive=eps_positive)
    _check_real("offset", offset, positive=False)

    if weight is not None:
        _check_dtype(wn, weight)
        if tuple(weight.shape) != (n,):
            raise ContractValueError(
                f"{wn} must have shape (N,) = ({n},) (got {tuple(weight.shape)})"
            )
        if weight.device != x.device:
            raise ContractValueError(
                f"{wn} must be on {xn}'s device {x.device} (got {weight.device})"
            )
        if rounding == "llama" and weight.dtype == torch.float64 and x.dtype != torch.float64:
            raise ContractTypeError(
                f"rounding='llama' with a float64 {wn} needs float64 {xn} "
                f"(got {xn} {x.dtype}): multiply by the weight outside the kernel"
            )
    elif float(offset) != 0.0:
        raise ContractValueError(
            f"offset requires a weight: offset + weight scales y (got offset={offset})"
        )

    if residual is not None:
        if not isinstance(residual, torch.Tensor):
            raise ContractTypeError(
                f"residual must be a torch.Tensor or None (got {type(residual).__name__})"
            )
        _check_layout("residual", residual)
        if residual.shape != x.shape:
            raise ContractValueError(
                f"residual must have x's shape {tuple(x.shape)} (got {tuple(residual.shape)})"
            )
        if residual.dtype != x.dtype and (x.dtype, residual.dtype) not in _MIXED_RESIDUAL:
            raise ContractTypeError(
                f"residual must have x's dtype {x.dtype}, or be float32 beside a float16 / "
                "bfloat16 x or float16 / bfloat16 beside a float32 x (x + residual is then "
                f"float32) (got {residual.dtype})"
            )
        if residual.device != x.device:
            raise ContractValueError(
                f"residual must be on x's device {x.device} (got {residual.device})"
            )

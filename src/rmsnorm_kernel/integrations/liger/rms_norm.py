"""Liger-Kernel's RMSNorm API on this package's kernels.

``from rmsnorm_kernel.integrations.liger import LigerRMSNorm, liger_rms_norm, LigerRMSNormFunction``
stands in for ``liger_kernel.transformers.rms_norm.LigerRMSNorm``,
``liger_kernel.transformers.functional.liger_rms_norm`` and
``liger_kernel.ops.rms_norm.LigerRMSNormFunction`` (signatures, defaults, attribute names and
``extra_repr`` as in Liger-Kernel 0.8.5 / its main branch; Liger itself is never imported).

What Liger computes (``src/liger_kernel/ops/rms_norm.py``, ``_rms_norm_forward_kernel``), and
what runs here; ``r = rsqrt(mean(x**2) + eps)`` in float32, the output always in ``X.dtype``
(Liger allocates ``Y`` as ``torch.empty_like(X)``, whatever W's dtype):

- ``"llama"``: ``x * r`` in float32, rounded to ``X.dtype``, then times ``offset + W`` (float32
  when W is 16-bit or float32), stored in ``X.dtype``. Here: ``rmsnorm(X, W, eps,
  offset=offset, rounding="llama")`` (the same two roundings), cast to ``X.dtype`` where the
  kernel's promoted dtype is wider (a float32 W beside a 16-bit X: the float32 product Liger
  stores, rounded once, as Liger's store rounds it).
- ``"gemma"``: everything in float32, one rounding to ``X.dtype``. Here: ``rounding="torch"``
  with ``offset``, the same arithmetic.
- ``"none"``: Liger computes in ``X.dtype`` itself (squares, sum, ``x * r`` and the weight
  product rounded to 16 bits at each step for a 16-bit X). Here it is computed in float32 with
  one rounding to ``X.dtype`` (``rounding="torch"``): more accurate than Liger's, not its bits.

Where this differs from Liger (documented, not hidden):

- ``in_place``: Liger's memory optimisation writes dX into dY's buffer in the backward (so the
  upstream gradient tensor is overwritten). It is accepted and ignored here: dX is a fresh
  tensor and the incoming gradient is never modified (the same values either way).
- ``row_mode``: Liger's choice between its row and block kernels, a speed knob; accepted and
  ignored (this package picks its own launch configs).
- float64 X: Liger converts X to float32 in the llama and gemma modes; here float64 is computed
  in float64 (more accurate).
- A DTensor X is gathered (``full_tensor()``), the result is a plain tensor and X's gradient the
  plain gathered one, and a DTensor gradient of the output is gathered too: all as Liger does
  (its tensor-parallel use: X sharded over the hidden dim, W plain). For each rank normalising
  its own rows with X's placements kept, call ``rmsnorm_kernel.rmsnorm``
  (``rmsnorm_kernel.dtensor``).
- :class:`LigerRMSNormFunction` is not a ``torch.autograd.Function`` subclass: it has only
  ``apply`` (same positional order as Liger's ``forward``), which builds the autograd graph
  through this package's own Function.
- Errors: where Liger asserts (``AssertionError``) or fails inside Triton, these raise
  ``ContractValueError`` / ``ContractTypeError`` (``ValueError`` / ``TypeError``) naming the
  argument and the rule, before any output is written: an unknown ``casting_mode`` or
  ``init_fn``, a non-real ``eps`` / ``offset`` (any finite value is taken, as Liger takes any),
  a W whose shape is not ``(X.shape[-1],)``.
"""

from __future__ import annotations

import torch
from torch import nn

from ... import dtensor
from ...contract import ContractTypeError, ContractValueError, check_contract, check_real
from ...function import _rmsnorm

#: Liger's ``_str_to_casting_mode``: names and their integer codes (both are accepted).
CASTING_MODES = {"llama": 0, "gemma": 1, "none": -1}
_MODE_OF_CODE = {code: name for name, code in CASTING_MODES.items()}


def casting_mode_name(casting_mode) -> str:
    """``"llama"`` / ``"gemma"`` / ``"none"`` for a name or Liger's integer code, else raise."""
    if isinstance(casting_mode, str) and casting_mode in CASTING_MODES:
        return casting_mode
    if (
        isinstance(casting_mode, int)
        and not isinstance(casting_mode, bool)
        and casting_mode in _MODE_OF_CODE
    ):
        return _MODE_OF_CODE[casting_mode]
    raise ContractValueError(
        "casting_mode must be one of 'llama', 'gemma', 'none' (or Liger's integer codes 0, 1, "
        f"-1) (got {casting_mode!r})"
    )


def check_module_args(init_fn, casting_mode, eps, offset) -> None:
    """A Liger module's constructor arguments, refused at construction, not at the first
    forward (Liger asserts ``init_fn`` only)."""
    if init_fn not in ("ones", "zeros"):
        raise ContractValueError(f"init_fn must be either 'ones' or 'zeros', got {init_fn!r}")
    casting_mode_name(casting_mode)
    check_real("eps", eps)
    check_real("offset", offset)


def add_weight(module: nn.Module, hidden_size, init_fn: str, affine: bool = True) -> None:
    """A Liger module's ``weight``: ``(hidden_size,)`` of ones or zeros in the default dtype, as
    Liger creates it, or None (``affine=False``)."""
    if affine:
        init = torch.ones if init_fn == "ones" else torch.zeros
        module.weight = nn.Parameter(init(hidden_size))
    else:
        module.register_parameter("weight", None)


def _forward(X, W, eps, offset, casting_mode, R=None, round_to_x=True):
    """Liger's forward with every argument checked first (see the module docstring): ``Y``, or
    ``(Y, S)`` with ``S = X + R`` (X's dtype) when the residual ``R`` is given (Liger's fused
    add, :mod:`.fused_add`). ``round_to_x=False``: Y in the kernel's dtype, not rounded to X's
    where that is wider (llama mode's float32 product beside a float32 W, which Liger's
    modulated norm keeps until its own store: :mod:`.modulated`)."""
    mode = casting_mode_name(casting_mode)
    if R is None and dtensor.involved(X):  # Liger's tensor-parallel input: gathered, plain
        y = _forward(_Gather.apply(X), W, eps, offset, casting_mode, None, round_to_x)
        return _PlainGrad.apply(y)
    check_real("eps", eps)
    check_real("offset", offset)
    eps, offset = float(eps), float(offset)
    if not isinstance(X, torch.Tensor):
        raise ContractTypeError(f"X must be a torch.Tensor (got {type(X).__name__})")
    if R is not None:
        _check_residual(X, R)
    if W is not None:
        if not isinstance(W, torch.Tensor):
            raise ContractTypeError(f"W must be a torch.Tensor or None (got {type(W).__name__})")
        if X.dim() >= 1 and tuple(W.shape) != (X.shape[-1],):
            raise ContractValueError(
                f"W must have shape (hidden_size,) = ({X.shape[-1]},), X's last dim (got "
                f"{tuple(W.shape)})"
            )
    if W is None:
        offset = 0.0  # Liger's kernel skips ``offset + W`` when there is no weight
    check_contract(X, W, eps, offset=offset, eps_positive=False, names=("X", "W"))
    wide_w = W is not None and W.dtype == torch.float64 and X.dtype != torch.float64
    if mode == "llama" and wide_w:
        # Liger multiplies the rounded x * r by a float64 (offset + W), then stores X's dtype.
        normed, S = _with_sum(_rmsnorm(X, None, eps, 0.0, R, "llama", False), R)
        y = normed * (W + offset)
        y = y.to(X.dtype) if round_to_x else y
    else:
        # llama: Liger's two roundings; gemma, none: float32 throughout, one rounding
        rounding = "llama" if mode == "llama" else "torch"
        y, S = _with_sum(_rmsnorm(X, W, eps, offset, R, rounding, False), R)
        y = y if y.dtype == X.dtype or not round_to_x else y.to(X.dtype)
    return y if R is None else (y, S)


def _with_sum(out, R):
    """``_rmsnorm``'s result as ``(y, x + residual or None)``."""
    return out if R is not None else (out, None)


def _check_residual(X, R) -> None:
    """Liger's fused add stores ``S = X + R`` in X's dtype over X's rows: R must be a plain tensor
    of X's shape, dtype and device (Liger views both as ``(-1, hidden)``; mixed dtypes would
    round S differently from the sum it normalises)."""
    if not isinstance(R, torch.Tensor):
        raise ContractTypeError(f"R must be a torch.Tensor (got {type(R).__name__})")
    if dtensor.involved(X, R):
        raise ContractTypeError(
            "X and R must be plain tensors: Liger's fused add has no DTensor path (for each "
            "rank's rows with placements kept, call rmsnorm_kernel.rmsnorm(x, w, eps, "
            "residual=r))"
        )
    if R.shape != X.shape or R.dtype != X.dtype or R.device != X.device:
        raise ContractValueError(
            f"R must have X's shape {tuple(X.shape)}, dtype {X.dtype} and device {X.device} "
            f"(got {tuple(R.shape)}, {R.dtype}, {R.device})"
        )


class _Gather(torch.autograd.Function):
    """``X.full_tensor()`` whose backward hands X the plain gradient, as Liger's Function
    (which gathers X inside its forward) returns it."""

    @staticmethod
    def forward(ctx, x):
        return x.full_tensor()

    @staticmethod
    def backward(ctx, dx):
        return dx


class _PlainGrad(torch.autograd.Function):
    """Identity whose backward gathers a DTensor gradient (``full_tensor()``), as Liger's
    backward does with its dY: the plain output of a gathered DTensor X may be handed the
    sharded gradient of the tensor-parallel layer after it."""

    @staticmethod
    def forward(ctx, y):
        return y.view_as(y)

    @staticmethod
    def backward(ctx, dy):
        return dy.full_tensor() if dtensor.involved(dy) else dy


class LigerRMSNormFunction:
    """``LigerRMSNormFunction.apply(X, W, eps, offset=0.0, casting_mode="llama", in_place=True,
    row_mode=None)`` -> ``Y`` (X's shape and dtype), differentiable in X and W.

    Liger's positional order. ``in_place`` and ``row_mode`` are accepted and ignored (see the
    module docstring). Not an ``autograd.Function`` subclass: ``apply`` alone is provided.
    """

    @staticmethod
    def apply(X, W, eps, offset=0.0, casting_mode="llama", in_place=True, row_mode=None):
        return _forward(X, W, eps, offset, casting_mode)


def liger_rms_norm(X, W, eps, offset: float = 0.0, casting_mode: str = "llama", in_place=True):
    """``liger_kernel.transformers.functional.liger_rms_norm``: ``Y`` in X's shape and dtype.

    ``casting_mode``: ``"llama"`` / ``"gemma"`` / ``"none"`` (or 0 / 1 / -1); ``in_place`` is
    ignored (Liger's dX-into-dY buffer reuse). See the module docstring for each mode's rounding.
    """
    return _forward(X, W, eps, offset, casting_mode)


class LigerRMSNorm(nn.Module):
    """``liger_kernel.transformers.rms_norm.LigerRMSNorm`` on this package's kernels.

    Args (Liger's, with its defaults):
        hidden_size: the normalised last dim N.
        eps: added to the mean square (attribute ``variance_epsilon``, as Liger and Hugging Face
            name it).
        offset: scale by ``offset + weight`` (Gemma: 1.0).
        casting_mode: ``"llama"`` (default), ``"gemma"`` or ``"none"`` (module docstring).
        init_fn: ``"ones"`` or ``"zeros"``, the weight's initial value.
        in_place: stored, ignored (Liger's backward buffer reuse).
        row_mode: stored, ignored (Liger's kernel choice).
        elementwise_affine: ``False``: no weight (``weight`` is None, as in Liger).

    The weight is created as Liger creates it: ``torch.ones(hidden_size)`` (default dtype and
    device). ``state_dict`` keys (``weight``) and ``extra_repr`` are Liger's.
    """

    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=0.0,
        casting_mode="llama",
        init_fn="ones",
        in_place=True,
        row_mode=None,
        elementwise_affine=True,
    ):
        super().__init__()
        check_module_args(init_fn, casting_mode, eps, offset)
        self.elementwise_affine = elementwise_affine
        add_weight(self, hidden_size, init_fn, elementwise_affine)
        self.variance_epsilon, self.offset, self.casting_mode, self.in_place, self.row_mode = (
            eps,
            offset,
            casting_mode,
            in_place,
            row_mode,
        )

    def forward(self, hidden_states):
        return LigerRMSNormFunction.apply(
            hidden_states,
            self.weight,
            self.variance_epsilon,
            self.offset,
            self.casting_mode,
            self.in_place,
            self.row_mode,
        )

    def extra_repr(self):
        shape = tuple(self.weight.shape) if self.weight is not None else None
        return (
            f"weight_shape={shape}, eps={self.variance_epsilon}, offset={self.offset}, "
            f"in_place={self.in_place}, row_mode={self.row_mode}"
        )

"""Liger-Kernel's modulated RMSNorm, ``y = (1 + scale) * RMSNorm(x) + shift`` (DiT / AdaLN).

Stands in for ``liger_kernel.transformers.modulated_rms_norm.LigerModulatedRMSNorm``,
``liger_kernel.transformers.functional.liger_modulated_rms_norm`` and
``liger_kernel.ops.LigerModulatedRMSNormFunction`` (signatures, defaults, attribute names and
``extra_repr`` as on Liger's main branch of 2026-08).

What Liger computes (``src/liger_kernel/ops/modulated_rms_norm.py``): its RMSNorm of each row
(the casting modes of :mod:`.rms_norm`), times ``1 + scale``, plus ``shift``, stored in X's
dtype. ``scale`` (and ``shift``, of the same number of elements) holds ``k = numel / N`` rows of
N values; ``k`` must divide X's row count M, and row ``i`` of X takes modulation row
``i // (M / k)``: one row for all (``(N,)``), one per batch of a ``(B, T, N)`` X (``(B, N)``), or
one per row (X's shape).

Here the norm is this package's kernel and the modulation two PyTorch element-wise ops on its
rows, whose result is stored in X's dtype. The rows enter the modulation as Liger's do: rounded
to X's dtype where Liger rounds them (llama: ``x * r`` before the weight; gemma: the normed
product), in float32 where Liger keeps them wider (llama's product by ``offset + W``, which
Liger makes float32 whatever W's dtype: a 16-bit W is widened here). In
``"none"`` mode, which Liger computes in X's dtype, everything here is float32 (X and W widened
exactly) and rounded once at the end, so the gradients of scale and shift are sums of float32
products too (Liger's backward also recomputes unrounded rows for them). The gradient reaching
the rows, ``dY * (1 + scale)``, is rounded to the dtype of dY and scale (X's when scale is 16-bit
too) before W's and X's gradients are formed from it, as Liger's backward rounds it (its
``dRms_row``); Liger's own tests compare W's gradient with a bfloat16 reference that rounds the
same way, and unrounded it missed their tolerance in 32 of 80 bfloat16 llama draws at
5×123×123 (rounded: 4 of 80; the unrounded one is the closer to float64). The gradients of scale
and shift are autograd's sums over each modulation row's rows (deterministic, where Liger's use
float atomics), in their own dtypes. Not fused: the normalised rows are written once and read
again, where Liger's kernel modulates before its one store. Under ``torch.compile`` Inductor
fuses the two element-wise ops and computes them in float32 before one rounding, so 16-bit
results may differ from eager (and from Liger's) in the last bit. Besides :mod:`.rms_norm`'s
differences (``in_place`` ignored), nothing differs.
"""

from __future__ import annotations

import torch
from torch import nn

from ...contract import ContractTypeError, ContractValueError
from .rms_norm import _forward, add_weight, casting_mode_name, check_module_args

_HALF = (torch.float16, torch.bfloat16)


def _widened(t):
    """A 16-bit tensor in float32 (exact; differentiable), anything else as it is."""
    return t.float() if isinstance(t, torch.Tensor) and t.dtype in _HALF else t


def _check_modulation(X, scale, shift) -> int:
    """The number of modulation rows ``k``; refuses what Liger asserts, naming the argument."""
    if not isinstance(X, torch.Tensor):
        raise ContractTypeError(f"X must be a torch.Tensor (got {type(X).__name__})")
    if X.dim() < 1 or X.shape[-1] < 1:
        raise ContractValueError(
            f"X must have at least 1 dim and a last dim N >= 1 (got shape {tuple(X.shape)})"
        )
    n = X.shape[-1]
    rows = X.numel() // n
    for name, t in (("scale", scale), ("shift", shift)):
        if t is None and name == "shift":
            continue
        if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
            what = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise ContractTypeError(f"{name} must be a floating torch.Tensor (got {what})")
        if t.device != X.device:
            raise ContractValueError(f"{name} must be on X's device {X.device} (got {t.device})")
    if scale.numel() % n or scale.numel() == 0:
        raise ContractValueError(
            f"scale must hold whole rows of X's hidden size {n}: at least one, numel a multiple "
            f"of {n} (got shape {tuple(scale.shape)})"
        )
    k = scale.numel() // n
    if rows % k:
        raise ContractValueError(
            f"scale's {k} rows must divide X's {rows} rows (each modulation row serves a block "
            "of consecutive rows)"
        )
    if shift is not None and shift.numel() != scale.numel():
        raise ContractValueError(
            f"shift must have as many elements as scale ({scale.numel()}; got shape "
            f"{tuple(shift.shape)})"
        )
    return k


class _RoundedGrad(torch.autograd.Function):
    """Identity whose backward rounds the incoming gradient to ``dtype`` (kept in its own)."""

    @staticmethod
    def forward(ctx, y, dtype):
        ctx.dtype = dtype
        return y.view_as(y)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dtype).to(g.dtype), None


def _modulated(X, W, scale, shift, eps, offset, casting_mode) -> torch.Tensor:
    k = _check_modulation(X, scale, shift)
    mode = casting_mode_name(casting_mode)
    # The rows enter the modulation as wide as Liger keeps them (module docstring): llama's
    # ``offset + W`` is float32 there, so is its product; "none" is float32 throughout here.
    X_in = _widened(X) if mode == "none" else X
    W_in = _widened(W) if mode in ("none", "llama") else W
    y = _forward(X_in, W_in, eps, offset, casting_mode, round_to_x=False)
    # Liger's backward forms the rows' gradient ``dY * (1 + scale)`` in dY's and scale's dtype
    # (rounded there when both are 16-bit) before W's and X's gradients use it: so here.
    grad_dtype = torch.promote_types(X.dtype, scale.dtype)
    if y.dtype != grad_dtype and y.requires_grad:
        y = _RoundedGrad.apply(y, grad_dtype)
    n = y.shape[-1]
    blocks = (k, y.numel() // (k * n), n)  # modulation row i serves block i of X's rows
    out = y.reshape(blocks) * (1 + scale.reshape(k, 1, n))
    if shift is not None:
        out = out + shift.reshape(k, 1, n)
    return out.reshape(y.shape).to(X.dtype)  # one rounding of the modulated float32 rows


class LigerModulatedRMSNormFunction:
    """``LigerModulatedRMSNormFunction.apply(X, W, scale, shift, eps, offset=0.0,
    casting_mode="llama", in_place=True)`` -> ``Y`` (X's shape and dtype), differentiable in X,
    W, scale and shift. Liger's positional order; ``in_place`` is accepted and ignored. Not an
    ``autograd.Function`` subclass: ``apply`` alone is provided."""

    @staticmethod
    def apply(X, W, scale, shift, eps, offset=0.0, casting_mode="llama", in_place=True):
        return _modulated(X, W, scale, shift, eps, offset, casting_mode)


def liger_modulated_rms_norm(
    X,
    W,
    scale,
    shift=None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = True,
):
    """``liger_kernel.transformers.functional.liger_modulated_rms_norm``: ``(1 + scale) *
    RMSNorm(X) + shift`` in X's dtype (see the module docstring)."""
    return _modulated(X, W, scale, shift, eps, offset, casting_mode)


class LigerModulatedRMSNorm(nn.Module):
    """``liger_kernel.transformers.modulated_rms_norm.LigerModulatedRMSNorm``:
    ``forward(hidden_states, scale, shift=None)``.

    Args (Liger's, with its defaults): ``hidden_size``, ``eps=1e-6`` (attribute
    ``variance_epsilon``), ``offset=0.0``, ``casting_mode="llama"``, ``init_fn="ones"``,
    ``in_place=True`` (stored, ignored), ``elementwise_affine=True`` (False: ``weight`` is None).
    """

    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=0.0,
        casting_mode="llama",
        init_fn="ones",
        in_place=True,
        elementwise_affine=True,
    ):
        super().__init__()
        check_module_args(init_fn, casting_mode, eps, offset)
        self.elementwise_affine = elementwise_affine
        add_weight(self, hidden_size, init_fn, elementwise_affine)
        self.variance_epsilon = eps
        self.offset = offset
        self.casting_mode = casting_mode
        self.in_place = in_place

    def forward(self, hidden_states, scale, shift=None):
        return LigerModulatedRMSNormFunction.apply(
            hidden_states,
            self.weight,
            scale,
            shift,
            self.variance_epsilon,
            self.offset,
            self.casting_mode,
            self.in_place,
        )

    def extra_repr(self):
        weight_shape = tuple(self.weight.shape) if self.weight is not None else None
        return (
            f"weight_shape={weight_shape}, eps={self.variance_epsilon}, offset={self.offset}, "
            f"casting_mode={self.casting_mode}, in_place={self.in_place}"
        )

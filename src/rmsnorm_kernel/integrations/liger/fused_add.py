"""Liger-Kernel's fused add + RMSNorm on this package's fused-residual kernels.

Stands in for ``liger_kernel.transformers.fused_add_rms_norm.LigerFusedAddRMSNorm``,
``liger_kernel.transformers.functional.liger_fused_add_rms_norm`` and
``liger_kernel.ops.LigerFusedAddRMSNormFunction`` (signatures, defaults, attribute names and
``extra_repr`` as on Liger's main branch of 2026-08).

What Liger computes (``src/liger_kernel/ops/fused_add_rms_norm.py``), the decoder layer's
``hidden = residual + hidden; residual = hidden; hidden = norm(hidden)`` in one kernel:
``S = X + R`` stored in X's dtype, ``Y`` = Liger's RMSNorm of that stored ``S`` (the casting
modes of :mod:`.rms_norm`, ``Y`` in X's dtype), returned as ``(Y, S)``. The gradients of X and R
are one tensor's values: the norm's input gradient plus the gradient reaching ``S``.

Here ``S`` and ``Y`` come out of one launch of the forward with a residual (the sum rounded once
to X's dtype, then normalised from that rounded value, as Liger's kernel and Hugging Face's
decoder layer do), and the backward adds the gradient of ``S`` inside the backward kernel.
Differences from Liger, besides those of :mod:`.rms_norm` (``"none"`` computed in float32 with
one rounding, ``in_place`` accepted and ignored):

- R must have X's shape, dtype and device (refused by name otherwise, before any kernel runs);
  Liger's kernel silently mixes a wider R into an unrounded sum while storing the rounded one.
- W may be None (no weight, as :func:`.rms_norm.liger_rms_norm` takes); Liger's kernel needs W.
- DTensor inputs are refused (Liger's fused add has no DTensor path either);
  ``rmsnorm_kernel.rmsnorm(x, w, eps, residual=r)`` normalises each rank's rows.
"""

from __future__ import annotations

from torch import nn

from ...contract import ContractTypeError
from .rms_norm import _forward, add_weight, check_module_args


def _fused(X, R, W, eps, offset, casting_mode):
    """``(Y, S)``; R is required (``_forward`` without one would return Y alone)."""
    if R is None:
        raise ContractTypeError("R must be a torch.Tensor, the residual added to X (got None)")
    return _forward(X, W, eps, offset, casting_mode, R)


class LigerFusedAddRMSNormFunction:
    """``LigerFusedAddRMSNormFunction.apply(X, R, W, eps, offset=0.0, casting_mode="llama",
    in_place=False)`` -> ``(Y, S)``: ``S = X + R`` and its RMSNorm, both of X's shape and dtype,
    differentiable in X, R and W.

    Liger's positional order; ``in_place`` is accepted and ignored (the incoming gradients are
    never overwritten). Not an ``autograd.Function`` subclass: ``apply`` alone is provided.
    """

    @staticmethod
    def apply(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=False):
        return _fused(X, R, W, eps, offset, casting_mode)


def liger_fused_add_rms_norm(
    X, R, W, eps, offset: float = 0.0, casting_mode: str = "llama", in_place: bool = True
):
    """``liger_kernel.transformers.functional.liger_fused_add_rms_norm``: ``(Y, S)`` with
    ``S = X + R`` (X's dtype) and ``Y`` its RMSNorm in X's dtype (see the module docstring)."""
    return _fused(X, R, W, eps, offset, casting_mode)


class LigerFusedAddRMSNorm(nn.Module):
    """``liger_kernel.transformers.fused_add_rms_norm.LigerFusedAddRMSNorm``:
    ``forward(hidden_states, residual)`` -> ``(normed, hidden_states + residual)``.

    Args (Liger's, with its defaults):
        hidden_size: the normalised last dim N.
        eps: added to the mean square (attribute ``variance_epsilon``).
        offset: scale by ``offset + weight`` (Gemma: 1.0).
        casting_mode: ``"llama"`` (default), ``"gemma"`` or ``"none"``.
        init_fn: ``"ones"`` or ``"zeros"``, the weight's initial value.
        in_place: stored, ignored (Liger's backward buffer reuse).

    The weight is created as Liger creates it, ``(hidden_size,)`` in the default dtype;
    ``state_dict`` keys (``weight``) and ``extra_repr`` are Liger's.
    """

    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=0.0,
        casting_mode="llama",
        init_fn="ones",
        in_place=False,
    ):
        super().__init__()
        check_module_args(init_fn, casting_mode, eps, offset)
        add_weight(self, hidden_size, init_fn)
        self.variance_epsilon, self.offset, self.casting_mode, self.in_place = (
            eps,
            offset,
            casting_mode,
            in_place,
        )

    def forward(self, hidden_states, residual):
        return LigerFusedAddRMSNormFunction.apply(
            hidden_states,
            residual,
            self.weight,
            self.variance_epsilon,
            self.offset,
            self.casting_mode,
            self.in_place,
        )

    def extra_repr(self):
        return (
            f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}, offset={self.offset}, "
            f"in_place={self.in_place}"
        )

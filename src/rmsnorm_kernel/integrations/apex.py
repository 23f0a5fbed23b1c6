"""NVIDIA Apex's RMSNorm API on this package's kernels: swap the import, keep the calls.

``from rmsnorm_kernel.integrations.apex import FusedRMSNorm, MixedFusedRMSNorm, fused_rms_norm,
fused_rms_norm_affine, mixed_dtype_fused_rms_norm_affine`` stands in for the same names of
``apex.normalization.fused_layer_norm`` (signatures, defaults, attributes, ``extra_repr``; apex
itself is never imported).

What apex computes (``csrc/layer_norm_cuda.cpp``; ``csrc/layer_norm_cuda_kernel.cu``'s
``cuApplyLayerNorm_`` with ``rms_only``; the dtype dispatch
``DISPATCH_DOUBLE_FLOAT_HALF_AND_BFLOAT_INOUT_TYPES`` of ``csrc/type_shim.h``): over the
``normalized_shape`` trailing dims flattened into one row,
``r = rsqrt(mean(x**2) + eps)`` in ``U`` (float64 for float64 input, else float32) and

    y = gamma * V(r * x)        # V: the output dtype; the product in V (16-bit: float32, rounded)

which is this package's ``rounding="llama"`` where V is the input's dtype. Per entry point:

- ``fused_rms_norm(input, normalized_shape, eps)``: ``V(r * x)``, output in input's dtype.
- ``fused_rms_norm_affine(input, weight, ...)``: output in input's dtype, and apex reads the
  weight's memory *as* that dtype (no conversion, no check): a weight of another dtype gives
  garbage there, so it is refused here (``ContractTypeError`` naming ``weight``). Under CUDA
  autocast apex first casts input and weight to the autocast dtype (``_cast_if_autocast_enabled``),
  and so does this module; then they match.
- ``mixed_dtype_fused_rms_norm_affine``: the output in the *weight's* dtype (Megatron's
  convention: a float32 input, e.g. a float32 residual stream, with 16-bit weights gives a
  16-bit output). apex's dispatch takes input float64 -> weight float64 / float32 / float16 /
  bfloat16, float32 -> float32 / float16 / bfloat16, float16 -> float16, bfloat16 -> bfloat16;
  any other pair (a float32 weight beside a 16-bit input too) is "not implemented" there and
  refused here. Same dtypes run the kernel as above; a narrower weight runs ``x * r`` in the
  kernel (input's dtype), then ``V(...) * weight`` in PyTorch: apex's two roundings exactly.
- ``FusedRMSNorm`` / ``MixedFusedRMSNorm``: the modules, calling the two affine functions above
  (or ``fused_rms_norm`` with ``elementwise_affine=False``).

Where this differs from apex:

- ``memory_efficient`` (apex saves the output instead of the input and recomputes x in the
  backward): accepted and ignored; gradients are the same function of the inputs.
- apex's modules fall back to ``manual_rms_norm`` (a PyTorch formula) on CPU tensors, under
  ``torch.jit`` tracing/scripting and, for ``FusedRMSNorm``, under ``torch.compile``; these
  always run the kernel, with the CUDA path's semantics above (for matching dtypes the same
  values as ``manual_rms_norm``; for mismatched ones the refusal above instead of
  ``manual_rms_norm``'s promotion). Under ``torch.compile`` the kernel is one registered op.
- float64 input: apex's fallback ``manual_rms_norm`` takes the mean square in float32; its CUDA
  kernel, and this module, in float64.
- Errors are ``ContractValueError`` / ``ContractTypeError``, which are ``RuntimeError``s too, as
  apex's ``TORCH_CHECK`` / ``std::runtime_error`` are; messages keep apex's sentences where it
  has one.
"""

from __future__ import annotations

import warnings

import torch
from torch.nn import init
from torch.nn.parameter import Parameter

from ..contract import ContractTypeError, ContractValueError, check_normalized_shape, check_real
from ..function import _rmsnorm

#: apex's ``DISPATCH_DOUBLE_FLOAT_HALF_AND_BFLOAT_INOUT_TYPES``: output dtypes per input dtype.
MIXED_DTYPE_OUTPUTS = {
    torch.float64: (torch.float64, torch.float32, torch.float16, torch.bfloat16),
    torch.float32: (torch.float32, torch.float16, torch.bfloat16),
    torch.float16: (torch.float16,),
    torch.bfloat16: (torch.bfloat16,),
}


def _cast_if_autocast_enabled(*args):
    """apex's ``_cast_if_autocast_enabled``: under CUDA autocast, floating CUDA tensors (not
    float64) are cast to the autocast dtype; everything else passes through."""
    if not torch.is_autocast_enabled("cuda"):
        return args
    dtype = torch.get_autocast_dtype("cuda")

    def cast(a):
        if (
            isinstance(a, torch.Tensor)
            and a.is_floating_point()
            and a.is_cuda
            and a.dtype != torch.float64
        ):
            return a.to(dtype)
        return a

    return tuple(cast(a) for a in args)


def _check_args(input, shape, eps, memory_efficient) -> None:
    """apex's ``check_args`` (its sentences), plus eps and memory_efficient's types."""
    if not isinstance(input, torch.Tensor):
        raise ContractTypeError(f"input must be a torch.Tensor (got {type(input).__name__})")
    if len(shape) < 1:
        raise ContractValueError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
            f"one element, but got normalized_shape={list(shape)}"
        )
    k = len(shape)
    if input.dim() < k or tuple(input.shape[input.dim() - k :]) != shape:
        raise ContractValueError(
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], but got input of size{list(input.shape)}"
        )
    check_real("eps", eps)
    if not isinstance(memory_efficient, bool):
        raise ContractTypeError(
            f"memory_efficient must be a bool (got {type(memory_efficient).__name__})"
        )


def _check_weight(weight, shape, name: str) -> None:
    if not isinstance(weight, torch.Tensor):
        raise ContractTypeError(
            f"{name}: weight must be a torch.Tensor (got {type(weight).__name__})"
        )
    if tuple(weight.shape) != shape:
        raise ContractValueError(
            f"{name}: weight must have shape normalized_shape={list(shape)} "
            f"(got {list(weight.shape)})"
        )


def _rows(input, shape):
    """``input [..., *shape]`` -> ``[..., prod(shape)]`` (a view when the layout allows)."""
    return input if len(shape) == 1 else input.flatten(input.dim() - len(shape))


def _norm(input, shape, weight, eps) -> torch.Tensor:
    """``gamma * V(r * x)`` with V = input's dtype (weight None: ``V(r * x)``): the kernel's
    llama rounding, whose promoted dtype is the input's when the weight's dtype matches."""
    rows = _rows(input, shape)
    w = None if weight is None else weight.reshape(-1)
    y = _rmsnorm(rows, w, float(eps), 0.0, None, "llama", False, ("input", "weight"))
    return y.view(input.shape)


def fused_rms_norm(input, normalized_shape, eps=1e-6, memory_efficient=False):
    """``apex.normalization.fused_layer_norm.fused_rms_norm``: no weight; y in input's dtype."""
    (input,) = _cast_if_autocast_enabled(input)
    shape = check_normalized_shape(normalized_shape)
    _check_args(input, shape, eps, memory_efficient)
    return _norm(input, shape, None, eps)


def fused_rms_norm_affine(input, weight, normalized_shape, eps=1e-6, memory_efficient=False):
    """``apex.normalization.fused_layer_norm.fused_rms_norm_affine``: y in input's dtype; the
    weight must have the input's dtype (apex reads it as that dtype; module docstring)."""
    input, weight = _cast_if_autocast_enabled(input, weight)
    shape = check_normalized_shape(normalized_shape)
    _check_args(input, shape, eps, memory_efficient)
    _check_weight(weight, shape, "fused_rms_norm_affine")
    if weight.dtype != input.dtype:
        raise ContractTypeError(
            f"fused_rms_norm_affine: weight must have input's dtype {input.dtype} (got "
            f"{weight.dtype}): apex's kernel reads the weight as the input's dtype. Cast one of "
            "them, or use mixed_dtype_fused_rms_norm_affine / MixedFusedRMSNorm for an output "
            "in the weight's dtype"
        )
    return _norm(input, shape, weight, eps)


def mixed_dtype_fused_rms_norm_affine(
    input, weight, normalized_shape, eps=1e-6, memory_efficient=False
):
    """``apex.normalization.fused_layer_norm.mixed_dtype_fused_rms_norm_affine``: y in the
    weight's dtype, for apex's (input, weight) dtype pairs (:data:`MIXED_DTYPE_OUTPUTS`)."""
    input, weight = _cast_if_autocast_enabled(input, weight)
    shape = check_normalized_shape(normalized_shape)
    _check_args(input, shape, eps, memory_efficient)
    _check_weight(weight, shape, "mixed_dtype_fused_rms_norm_affine")
    allowed = MIXED_DTYPE_OUTPUTS.get(input.dtype, ())
    if weight.dtype not in allowed:
        pairs = "; ".join(
            f"{str(i).removeprefix('torch.')} -> "
            f"{', '.join(str(o).removeprefix('torch.') for o in outs)}"
            for i, outs in MIXED_DTYPE_OUTPUTS.items()
        )
        raise ContractTypeError(
            f"mixed_dtype_fused_rms_norm_affine: weight dtype {weight.dtype} beside input dtype "
            f"{input.dtype} is not one of apex's (input -> weight/output) dtype pairs ({pairs})"
        )
    if weight.dtype == input.dtype:
        return _norm(input, shape, weight, eps)
    # A narrower weight: apex rounds r * x to the weight's dtype, then multiplies in it.
    normed = _norm(input, shape, None, eps)  # r * x in U, rounded to input's dtype (U's own)
    return normed.to(weight.dtype) * weight


class FusedRMSNorm(torch.nn.Module):
    r"""``apex.normalization.FusedRMSNorm`` on this package's kernels.

    .. math::
        y = \frac{x}{\mathrm{RMS}[x]} * \gamma

    Args (apex's, with its defaults):
        normalized_shape: int or sequence: the trailing dims normalised over (flattened into one
            row); stored as ``torch.Size``.
        eps: added to the mean square. Default: 1e-5.
        elementwise_affine: a learnable ``weight`` of ``normalized_shape``, initialised to ones
            (default dtype and device, as apex creates it).
        memory_efficient: stored, ignored (module docstring).
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__()
        normalized_shape = check_normalized_shape(normalized_shape)
        self.normalized_shape = torch.Size(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.memory_efficient = memory_efficient
        if self.elementwise_affine:
            self.weight = Parameter(torch.empty(*normalized_shape))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input):
        if self.elementwise_affine:
            return fused_rms_norm_affine(
                input, self.weight, self.normalized_shape, self.eps, self.memory_efficient
            )
        return fused_rms_norm(input, self.normalized_shape, self.eps, self.memory_efficient)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(
            **self.__dict__
        )


class MixedFusedRMSNorm(FusedRMSNorm):
    """``apex.normalization.MixedFusedRMSNorm``: the output in the weight's dtype
    (:func:`mixed_dtype_fused_rms_norm_affine`); always affine.

    As apex: ``elementwise_affine`` is warned about, ``elementwise_affine=False`` raises (a
    ``RuntimeError``), other keyword arguments are accepted and ignored.
    """

    def __init__(self, normalized_shape, eps=1e-5, *, memory_efficient=False, **kwargs):
        if "elementwise_affine" in kwargs:
            warnings.warn(
                "MixedFusedRMSNorm does not support `elementwise_affine` argument", stacklevel=2
            )
            elementwise_affine = kwargs.pop("elementwise_affine")
            if not elementwise_affine:
                raise ContractValueError(
                    "MixedFusedRMSNorm does not support `elementwise_affine = False`"
                )
        super().__init__(
            normalized_shape=normalized_shape,
            eps=eps,
            elementwise_affine=True,
            memory_efficient=memory_efficient,
        )

    def forward(self, input: torch.Tensor):
        return mixed_dtype_fused_rms_norm_affine(
            input, self.weight, self.normalized_shape, self.eps, self.memory_efficient
        )

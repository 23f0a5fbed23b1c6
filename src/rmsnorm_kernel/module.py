"""``RMSNorm`` and ``rms_norm``: drop-ins for ``torch.nn.RMSNorm`` and
``torch.nn.functional.rms_norm`` that run the Triton kernels."""

from __future__ import annotations

import math

import torch
from torch import nn

from . import dtensor
from .contract import (
    MAX_N,
    ContractTypeError,
    ContractValueError,
    check_no_columns,
    check_normalized_shape,
)
from .function import _channels_last, _normal, _rmsnorm, contiguous_keeping_grad_layout


def _autocast_registered(device_type: str) -> bool:
    """Whether torch casts ``aten::rms_norm``'s inputs under autocast on this device type: an
    autocast kernel is registered for it. On CUDA that is the float32 list (torch 2.13's
    ``ATen/autocast_mode.h`` has ``rms_norm`` in ``AT_FORALL_FP32``); on CPU there is none."""
    key = "Autocast" + device_type.upper()
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("aten::rms_norm", key)
    except RuntimeError:  # a dispatch key this torch does not know
        return False


#: ``{device type: torch casts rms_norm's inputs to float32 under autocast}``, read once.
AUTOCAST_FLOAT32 = {"cuda": _autocast_registered("cuda"), "cpu": _autocast_registered("cpu")}


def _autocast_to_float32(x: torch.Tensor) -> bool:
    """Under autocast on x's device, would ``F.rms_norm`` cast a 16-bit x to float32?"""
    device_type = x.device.type
    return (
        AUTOCAST_FLOAT32.get(device_type, False)
        and torch.is_autocast_enabled(device_type)
        and x.dtype in (torch.float16, torch.bfloat16)
    )


def _float32(t: torch.Tensor | None) -> torch.Tensor | None:
    """Autocast's float32 cast: 16-bit floating tensors only (float64 is left alone)."""
    if t is None or t.dtype not in (torch.float16, torch.bfloat16):
        return t
    return t.float()


#: What the errors call rms_norm's tensors: its own (F.rms_norm's) argument names.
_NAMES = ("input", "weight")


def rms_norm(
    input: torch.Tensor,  # noqa: A002 - torch.nn.functional.rms_norm's argument name
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> torch.Tensor:
    """Same signature as ``torch.nn.functional.rms_norm``.

    ``input [..., *normalized_shape]`` -> same shape and dtype. Several normalised dims are
    flattened into one row of ``N = prod(normalized_shape)`` values (a view when the layout
    allows). ``eps=None`` means float32's machine epsilon (float64's for a float64 input), what
    ``F.rms_norm`` adds (:func:`~.function.default_eps`); as in ``F.rms_norm`` any
    finite eps is taken, ``eps <= 0`` too (a row whose mean square does not exceed ``-eps`` then
    comes out NaN or inf, as there; :func:`rmsnorm_kernel.rmsnorm` keeps the tutorial's eps > 0).

    Under autocast, as ``F.rms_norm``: where torch registers an autocast rule for
    ``aten::rms_norm`` (:data:`AUTOCAST_FLOAT32`; CUDA's float32 list), 16-bit inputs are cast to
    float32 first and the output is float32. (:func:`rmsnorm_kernel.rmsnorm` itself, which the
    Hugging Face integration uses to reproduce modules that autocast does not touch, never casts.)
    """
    if not isinstance(input, torch.Tensor):
        raise ContractTypeError(f"input must be a torch.Tensor (got {type(input).__name__})")
    if weight is not None and not isinstance(weight, torch.Tensor):
        raise ContractTypeError(
            f"weight must be a torch.Tensor or None (got {type(weight).__name__})"
        )
    shape = check_normalized_shape(normalized_shape)
    k = len(shape)
    # The messages carry F.rms_norm's own sentences, so code (and tests) matching them still do.
    if k == 0:
        raise ContractValueError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
            "one element, but got normalized_shape = ()"
        )
    if input.dim() < k or tuple(input.shape[input.dim() - k :]) != shape:
        raise ContractValueError(
            f"Given normalized_shape={shape}, expected input with shape [*, "
            f"{', '.join(map(str, shape))}], but got input of size {tuple(input.shape)}: "
            "input's trailing dims must equal normalized_shape"
        )
    if weight is not None and tuple(weight.shape) != shape:
        raise ContractValueError(
            "Expected weight to be of same shape as normalized_shape, but got weight of shape "
            f"{tuple(weight.shape)} and normalized_shape = {shape}"
        )
    if dtensor.involved(input, weight):  # each rank's rows (checked over all k normalised dims)

        def local(x, w, _):
            return rms_norm(x, shape, w, eps)

        return dtensor.local_call(local, input, weight, None, k)
    if _autocast_to_float32(input):  # F.rms_norm's autocast rule: inputs cast first
        input, weight = input.float(), _float32(weight)
    if 0 in shape:  # rows of no values: nothing to normalise; F.rms_norm returns them empty
        check_no_columns(input, weight, eps, _NAMES)
        if weight is None:
            return input.clone()
        # (an inference-mode input beside a weight that needs grad: a normal copy, which the
        # product may save for backward, as the kernels' path does)
        return (_normal(input) * weight).to(input.dtype)
    # eps as F.rms_norm takes it: any finite value (eps <= 0 too; see check_contract).
    if k == 1:
        return _rmsnorm(input, weight, eps, 0.0, None, "torch", False, _NAMES)
    n = math.prod(shape)
    if n > MAX_N:  # (named here: the flattened row's checks would call N the last dim)
        raise ContractValueError(
            f"normalized_shape={shape} makes rows of N = {n} values, over the kernels' "
            f"{MAX_N}: normalise over fewer or smaller dims"
        )
    fmt = _channels_last(input)  # F.rms_norm keeps a channels-last input's layout (y and dx)
    rows = (input if fmt is None else contiguous_keeping_grad_layout(input, fmt)).flatten(
        input.dim() - k
    )
    weight = None if weight is None else weight.reshape(-1)
    y = _rmsnorm(rows, weight, eps, 0.0, None, "torch", False, _NAMES).view(input.shape)
    return y if fmt is None else y.contiguous(memory_format=fmt)


# torch.fx.symbolic_trace records rms_norm as one call (a leaf, as it records F.rms_norm) instead
# of tracing into its checks, whose branches on shapes and dtypes Proxies cannot take.
torch.fx.wrap("rms_norm")


class RMSNorm(nn.RMSNorm):
    """``torch.nn.RMSNorm`` itself (a subclass: same constructor, attributes, ``state_dict``,
    ``reset_parameters``, ``repr``, and ``isinstance(m, torch.nn.RMSNorm)`` holds, as weight-decay
    and wrapping rules that look for norm classes expect) whose forward runs the kernels.

    Args:
        normalized_shape: the trailing shape normalised over (an int, or a tuple for several dims,
            which are flattened into one row of ``N = prod(normalized_shape)`` values).
        eps: a finite real (as ``torch.nn.RMSNorm``, ``<= 0`` is taken too), or ``None`` for
            what ``torch.nn.RMSNorm`` adds then: float32's machine epsilon (float64's for a
            float64 x), whatever x's dtype (:func:`~.function.default_eps`).
        elementwise_affine: learn a ``weight`` of ``normalized_shape``, initialised to ones.
    """

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            check_normalized_shape(normalized_shape), eps, elementwise_affine, device, dtype
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., *normalized_shape]`` -> same shape."""
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def __prepare_scriptable__(self):
        """``torch.jit.script`` calls this first: the forward launches Triton kernels from Python,
        which TorchScript cannot compile, so say so by name instead of its parser's error."""
        raise ContractTypeError(
            "rmsnorm_kernel.RMSNorm cannot be compiled by torch.jit.script (its forward launches "
            "Triton kernels from Python); use torch.jit.trace, torch.export or torch.compile, "
            "which record the registered op rmsnorm_kernel::rmsnorm_fwd"
        )

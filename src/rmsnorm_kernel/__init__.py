"""rmsnorm_kernel: a Triton RMSNorm (forward, input gradient, weight gradient) for PyTorch autograd.

Kernel layer (imports only torch and triton)::

    backend   choose compiled CUDA or Triton's interpreter (before any kernel is defined)
    reference the float64-capable oracle (the tutorial's ``rmsnorm_reference``, ``manual_backward``)
    contract  every rule the kernels rely on, checked before any output exists
    kernels   the @triton.jit functions
    config    frozen launch configs (ForwardConfig, BackwardConfig), one heuristic per kernel
    launch    cached compiled-kernel handles: a launch skips JITFunction.run after the first
    ops       launchers (rows, strides, allocations; an explicit config or the heuristic's)
    function  autograd.Function, torch.library ops, ``rmsnorm()``, ``CALLS``
    double_backward  the backward in PyTorch ops, differentiated again under create_graph
    transforms  torch.func and forward-mode AD: the kernel forward, derivatives in PyTorch ops
    dtensor   DTensor inputs (tensor / sequence parallel): each rank's local rows, placements kept
    module    ``RMSNorm`` / ``rms_norm``, drop-ins for ``torch.nn.RMSNorm`` / ``F.rms_norm``
    inductor_fusion  opt-in Inductor pass: residual add and gradient accumulation into the kernels
                     (imported on demand: ``from rmsnorm_kernel import inductor_fusion``)
"""

from .backend import BACKEND  # first: sets TRITON_INTERPRET before kernels are decorated
from .contract import (
    MAX_N,
    SUPPORTED_DTYPES,
    TUTORIAL_MAX_N,
    ContractTypeError,
    ContractValueError,
    check_contract,
)
from .function import CALLS, RMSNormFunction, reset_calls, rmsnorm
from .module import RMSNorm, rms_norm
from .ops import COPIES, backward_op, forward_op
from .reference import manual_backward, rmsnorm_reference

__all__ = [
    "BACKEND",
    "CALLS",
    "COPIES",
    "ContractTypeError",
    "ContractValueError",
    "MAX_N",
    "TUTORIAL_MAX_N",
    "SUPPORTED_DTYPES",
    "RMSNorm",
    "RMSNormFunction",
    "backward_op",
    "check_contract",
    "forward_op",
    "manual_backward",
    "reset_calls",
    "rms_norm",
    "rmsnorm",
    "rmsnorm_reference",
]
__version__ = "0.1.0"

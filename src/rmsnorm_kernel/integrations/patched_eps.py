"""The eps a norm patched for Hugging Face reads at each call, and its errors naming the module.

A patched norm reads ``variance_epsilon`` / ``eps`` from itself on every call, so a value set after
``patch`` is checked only when the norm runs: there the kernels' argument errors are re-raised
naming the module's class and the attribute (the model path is not known at call time).
"""

from __future__ import annotations

from torch import nn

from ..contract import ContractTypeError, ContractValueError

#: The kernels' argument errors, re-raised by a patched norm naming it.
ContractError = (ContractTypeError, ContractValueError)


def eps_of(module: nn.Module, attr: str):
    """The eps a patched norm reads at each call: None is refused, as the original's arithmetic
    refuses it (``patch`` does too; the kernels would read it as ``torch.nn.RMSNorm``'s
    default)."""
    eps = getattr(module, attr)
    if eps is None:
        raise TypeError(
            f"{type(module).__name__}.{attr} is None: the patched norm (rmsnorm_kernel) adds it "
            "to the mean square, as the original does; set a float > 0"
        )
    return eps


def named(module: nn.Module, attr: str, error: Exception) -> Exception:
    """``error`` (the kernels' argument check) naming the patched module and its eps: a value set
    after ``patch`` is only checked when the norm runs."""
    return type(error)(
        f"{type(module).__name__} (patched by rmsnorm_kernel; eps {getattr(module, attr)!r} from "
        f".{attr}): {error}"
    )

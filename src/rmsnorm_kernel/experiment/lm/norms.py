"""The language model's norm names in the builders' allow-list: ``hf``, ``liger``, ``triton_fused``.

Importing this module registers them (``lm.net`` does), beside the ``reference``, ``torch`` and
``triton`` every net can use:

    hf             Hugging Face's ``LlamaRMSNorm`` (the Llama baseline; usable in other nets too)
    liger          Liger-Kernel's ``LigerRMSNorm`` with Llama's rounding (needs the package, a GPU)
    triton_fused   the plain kernel layer in nets without a residual stream; in a Llama,
                   ``build_llama`` patches the model with ``fuse_residual=True`` instead
"""

from __future__ import annotations

from torch import nn

import rmsnorm_kernel

from ..core.builders import kernels_runnable, register_norm, require_module


def _llama_rmsnorm_available(field: str) -> None:
    require_module("transformers", "transformers", "norm=hf", field)


def _llama_rmsnorm(normalized_shape, eps: float = 1e-6) -> nn.Module:
    """``LlamaRMSNorm(N, eps)``: the ``hf`` norm, also usable in other nets."""
    _llama_rmsnorm_available("norm")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    (n,) = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return LlamaRMSNorm(n, eps=eps)


def _liger_available(field: str) -> None:
    """Liger's module imports here (it also needs a CUDA GPU to run)."""
    require_module("liger_kernel.transformers.rms_norm", "liger-kernel", "norm=liger", field)


def _liger_rmsnorm(normalized_shape, eps: float = 1e-6) -> nn.Module:
    """Liger-Kernel's ``LigerRMSNorm`` with Llama's rounding (``casting_mode="llama"``)."""
    _liger_available("norm")
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    (n,) = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return LigerRMSNorm(n, eps=eps, casting_mode="llama")


register_norm("hf", _llama_rmsnorm, available=_llama_rmsnorm_available)
register_norm("liger", _liger_rmsnorm, available=_liger_available)
register_norm("triton_fused", rmsnorm_kernel.RMSNorm, available=kernels_runnable)

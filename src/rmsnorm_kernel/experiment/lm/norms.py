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

from ..core.builders import SpecError, register_norm


def _llama_rmsnorm(normalized_shape, eps: float = 1e-6) -> nn.Module:
    """``LlamaRMSNorm(N, eps)``: the ``hf`` norm, also usable in other nets."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    (n,) = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return LlamaRMSNorm(n, eps=eps)


def _liger_rmsnorm(normalized_shape, eps: float = 1e-6) -> nn.Module:
    """Liger-Kernel's ``LigerRMSNorm`` with Llama's rounding (``casting_mode="llama"``)."""
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
    except ImportError as e:
        raise SpecError(
            "norm=liger needs the liger-kernel package (pip install liger-kernel) and a CUDA "
            f"GPU; it is not importable here ({e})"
        ) from e
    (n,) = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return LigerRMSNorm(n, eps=eps, casting_mode="llama")


register_norm("hf", _llama_rmsnorm)
register_norm("liger", _liger_rmsnorm)
register_norm("triton_fused", rmsnorm_kernel.RMSNorm)

"""Liger-Kernel's RMSNorm APIs on this package's kernels: swap the import, keep the calls.

``from rmsnorm_kernel.integrations.liger import ...`` stands in for Liger's names (Liger itself is
never imported):

- :mod:`.rms_norm`: ``LigerRMSNorm``, ``liger_rms_norm``, ``LigerRMSNormFunction`` (casting modes
  llama / gemma / none, Liger's integer codes, DTensor X gathered as Liger does).
- :mod:`.fused_add`: ``LigerFusedAddRMSNorm``, ``liger_fused_add_rms_norm``,
  ``LigerFusedAddRMSNormFunction``: ``S = X + R`` and its norm in one launch, ``(Y, S)``.
- :mod:`.modulated`: ``LigerModulatedRMSNorm``, ``liger_modulated_rms_norm``,
  ``LigerModulatedRMSNormFunction``: ``(1 + scale) * RMSNorm(X) + shift`` (not fused here).
- :mod:`.megatron`: ``LigerMegatronRMSNorm``, Megatron-Core's norm-builder constructor.
- :mod:`.models`: ``LigerRMSNormForGemma`` / ``Gemma2`` / ``Gemma3`` / ``Gemma4`` / ``Olmo2`` /
  ``Glm4`` / ``Qwen3Next``, the per-model defaults.

Each module's docstring lists where it differs from Liger.
"""

from .fused_add import LigerFusedAddRMSNorm, LigerFusedAddRMSNormFunction, liger_fused_add_rms_norm
from .megatron import LigerMegatronRMSNorm
from .models import (
    LigerRMSNormForGemma,
    LigerRMSNormForGemma2,
    LigerRMSNormForGemma3,
    LigerRMSNormForGemma4,
    LigerRMSNormForGlm4,
    LigerRMSNormForOlmo2,
    LigerRMSNormForQwen3Next,
)
from .modulated import (
    LigerModulatedRMSNorm,
    LigerModulatedRMSNormFunction,
    liger_modulated_rms_norm,
)
from .rms_norm import (
    CASTING_MODES,
    LigerRMSNorm,
    LigerRMSNormFunction,
    casting_mode_name,
    liger_rms_norm,
)

__all__ = [
    "CASTING_MODES",
    "LigerFusedAddRMSNorm",
    "LigerFusedAddRMSNormFunction",
    "LigerMegatronRMSNorm",
    "LigerModulatedRMSNorm",
    "LigerModulatedRMSNormFunction",
    "LigerRMSNorm",
    "LigerRMSNormForGemma",
    "LigerRMSNormForGemma2",
    "LigerRMSNormForGemma3",
    "LigerRMSNormForGemma4",
    "LigerRMSNormForGlm4",
    "LigerRMSNormForOlmo2",
    "LigerRMSNormForQwen3Next",
    "LigerRMSNormFunction",
    "casting_mode_name",
    "liger_fused_add_rms_norm",
    "liger_modulated_rms_norm",
    "liger_rms_norm",
]

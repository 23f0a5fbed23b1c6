"""Liger-Kernel's per-model RMSNorm classes: :class:`.rms_norm.LigerRMSNorm` with each model's
defaults (``liger_kernel.transformers.rms_norm``, main branch of 2026-08).

Gemma, Gemma 2, Gemma 3 and Qwen3-Next scale by ``1 + weight`` (weights start at zero) with every
step in float32 (``casting_mode="gemma"``); Olmo 2 and GLM-4 use Llama's rounding; Gemma 4 scales
by ``weight`` itself (weights start at one) in float32, and its ``with_scale=False`` norm (the
attention's ``v_norm``) has no weight. The classes differ from Liger's only where
:mod:`.rms_norm` says; Gemma 4's weight-less norm runs this package's kernel without a weight
(float32 math, one rounding to X's dtype), where Liger runs Hugging Face's PyTorch formula.
"""

from __future__ import annotations

from .rms_norm import LigerRMSNorm


class LigerRMSNormForGemma(LigerRMSNorm):
    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=1.0,
        casting_mode="gemma",
        init_fn="zeros",
        in_place=True,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)


class LigerRMSNormForGemma2(LigerRMSNorm):
    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=1.0,
        casting_mode="gemma",
        init_fn="zeros",
        in_place=False,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)


class LigerRMSNormForGemma3(LigerRMSNorm):
    """Gemma 3's norm takes ``dim`` (its q / k norms are per head)."""

    def __init__(
        self, dim, eps=0.000001, offset=1.0, casting_mode="gemma", init_fn="zeros", in_place=False
    ):
        super().__init__(dim, eps, offset, casting_mode, init_fn, in_place)


class LigerRMSNormForGemma4(LigerRMSNorm):
    """Gemma 4: ``weight`` itself (no ``1 +``), starting at one, float32 math; ``with_scale=False``:
    no weight (``weight`` is None)."""

    def __init__(
        self,
        dim,
        eps=1e-6,
        offset=0.0,
        casting_mode="gemma",
        init_fn="ones",
        in_place=False,
        with_scale=True,
    ):
        super().__init__(
            dim, eps, offset, casting_mode, init_fn, in_place, elementwise_affine=with_scale
        )
        self.with_scale = with_scale


class LigerRMSNormForOlmo2(LigerRMSNorm):
    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=0.0,
        casting_mode="llama",
        init_fn="ones",
        in_place=False,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)


class LigerRMSNormForGlm4(LigerRMSNorm):
    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=0.0,
        casting_mode="llama",
        init_fn="ones",
        in_place=False,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)


class LigerRMSNormForQwen3Next(LigerRMSNorm):
    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=1.0,
        casting_mode="gemma",
        init_fn="zeros",
        in_place=False,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)

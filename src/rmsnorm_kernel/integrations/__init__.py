"""Integrations: put the kernel into models written by other libraries.

``transformers``    ``patch(model)`` / ``unpatch(model)`` for Hugging Face models (Llama, Mistral,
                    Qwen2, Qwen3, Phi3, Gemma, Gemma2, Gemma3, T5 and any class whose norm is,
                    statement for statement, one of their three conventions).
``fused_residual``  ``patch(model, fuse_residual=True)``: Llama-style decoder layers whose
                    post-attention residual add runs inside the norm's kernel.
``liger``           Liger-Kernel's API: ``LigerRMSNorm``, ``liger_rms_norm``,
                    ``LigerRMSNormFunction.apply`` (casting modes llama / gemma / none), the fused
                    add (``LigerFusedAddRMSNorm``, ``liger_fused_add_rms_norm``), the modulated
                    norm (``LigerModulatedRMSNorm``), the Megatron-Core norm
                    (``LigerMegatronRMSNorm``) and the per-model classes
                    (``LigerRMSNormForGemma`` ... ``LigerRMSNormForQwen3Next``).
``apex``            NVIDIA Apex's API: ``FusedRMSNorm``, ``MixedFusedRMSNorm``, ``fused_rms_norm``,
                    ``fused_rms_norm_affine``, ``mixed_dtype_fused_rms_norm_affine``.
``flash_attn``      flash-attention's Triton API: ``rms_norm_fn``, ``RMSNorm``, ``layer_norm_fn``
                    and ``layer_norm_linear_fn`` with ``is_rms_norm=True`` (residual, prenorm,
                    residual_in_fp32, zero_centered_weight, out_dtype; no dropout), and its
                    PyTorch references ``rms_norm_ref`` / ``layer_norm_ref``.

This layer builds on the kernel layer only; it never imports the experiment layer or the CLI, and
it does not import ``transformers`` itself (it recognises the norm classes by their source), nor
Liger-Kernel, apex or flash-attn (their APIs are reproduced from their source, with the
differences each module's docstring lists).
"""

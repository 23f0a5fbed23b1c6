"""Integrations: put the kernel into models written by other libraries.

``transformers``    ``patch(model)`` / ``unpatch(model)`` for Hugging Face models (Llama, Mistral,
                    Qwen2, Qwen3, Phi3, Gemma, Gemma2, Gemma3, T5 and any class whose norm is,
                    statement for statement, one of their three conventions).
``fused_residual``  ``patch(model, fuse_residual=True)``: Llama-style decoder layers whose
                    post-attention residual add runs inside the norm's kernel.

This layer builds on the kernel layer only; it never imports the experiment layer or the CLI, and
it does not import ``transformers`` itself (it recognises the norm classes by their source).
"""

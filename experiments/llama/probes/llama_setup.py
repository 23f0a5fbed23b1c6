"""What our own Llama probes share with the project's shared ones (``llama_patch_step.py``,
``llama_compile_step.py``): the same model config and Liger swap, so the figures compare."""

from __future__ import annotations

import torch
from transformers import LlamaConfig


def llama_config(hidden: int, layers: int, seq: int) -> LlamaConfig:
    """The shared probes' config: MLP width 8/3 × hidden (rounded down to 256), heads of 128,
    8 KV heads, vocab 32000, SDPA."""
    return LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=int(hidden * 8 / 3) // 256 * 256,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 128,
        num_key_value_heads=8,
        max_position_embeddings=seq,
        attn_implementation="sdpa",
    )


def token_ids(batch: int, seq: int) -> torch.Tensor:
    """``(batch, seq)`` random token ids on the GPU."""
    return torch.randint(0, 32000, (batch, seq), device="cuda")


def liger_swap(model: torch.nn.Module) -> None:
    """Replace every ``LlamaRMSNorm`` by Liger's ``LigerRMSNorm(casting_mode="llama")`` holding
    the same weight Parameter (raises ImportError without liger-kernel)."""
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    for mod in list(model.modules()):
        for cname, child in list(mod.named_children()):
            if type(child).__name__ == "LlamaRMSNorm":
                new = LigerRMSNorm(
                    child.weight.shape[0],
                    eps=child.variance_epsilon,
                    offset=0.0,
                    casting_mode="llama",
                    init_fn="ones",
                )
                new.weight = child.weight
                setattr(mod, cname, new)

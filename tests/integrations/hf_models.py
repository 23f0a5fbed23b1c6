"""Tiny Hugging Face causal LMs of each family, built from a config (no download).

Sizes are chosen for Triton's interpreter: hidden 64, 2 layers, 4 heads of 16, vocab 128.
"""

from __future__ import annotations

import torch
import transformers as hf

#: family -> (config class, model class)
FAMILIES = {
    "llama": (hf.LlamaConfig, hf.LlamaForCausalLM),
    "mistral": (hf.MistralConfig, hf.MistralForCausalLM),
    "qwen2": (hf.Qwen2Config, hf.Qwen2ForCausalLM),
    "qwen3": (hf.Qwen3Config, hf.Qwen3ForCausalLM),
    "phi3": (hf.Phi3Config, hf.Phi3ForCausalLM),
    "gemma": (hf.GemmaConfig, hf.GemmaForCausalLM),
    "gemma2": (hf.Gemma2Config, hf.Gemma2ForCausalLM),
    "gemma3": (hf.Gemma3TextConfig, hf.Gemma3ForCausalLM),
}
GEMMA_STYLE = {"gemma", "gemma2", "gemma3"}  # scale = 1 + weight, weights initialised to zero
VOCAB = 128


def tiny_model(family: str, seed: int = 0) -> torch.nn.Module:
    """A float32 model in eval mode (no dropout) whose norm weights are random, not the init value.

    With weights all ones (Llama) or all zeros (Gemma) a misplaced weight would go unnoticed.
    """
    config_cls, model_cls = FAMILIES[family]
    config = config_cls(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        rms_norm_eps=1e-5,
    )
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    centre = 0.0 if family in GEMMA_STYLE else 1.0
    with torch.no_grad():
        for module in model.modules():
            if "RMSNorm" in type(module).__name__:
                module.weight.normal_(centre, 0.3)
    return model


def tokens(batch: int = 2, seq: int = 8, seed: int = 1) -> torch.Tensor:
    """``(batch, seq)`` int64 token ids."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, seq), generator=generator)


def logits_and_grads(model, ids) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward + backward of the LM loss: ``(logits (B, S, V), {param name: grad})``."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach().clone(), grads


def distinct_tokens(batch: int = 2, seq: int = 8, seed: int = 1) -> torch.Tensor:
    """``(batch, seq)`` int64 token ids, no id twice: for bit-for-bit comparisons on CUDA, where
    the embedding's gradient adds each position's row with an atomic add (a repeated id would
    sum its rows in a varying order)."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randperm(VOCAB - 3, generator=generator)[: batch * seq] + 3).view(batch, seq)

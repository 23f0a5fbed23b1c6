"""A Hugging Face ``LlamaForCausalLM`` as an experiment net, with each RMSNorm branch.

``build_llama`` is registered in the builders' allow-list as ``"llama"``: its arguments are plain
numbers and names, stored as the spec of every exported checkpoint, so a reload rebuilds exactly
this net. The ``norm`` argument picks the branch:

    hf       the model's own ``LlamaRMSNorm`` (the baseline)
    triton   ``rmsnorm_kernel.integrations.transformers.patch``: the same modules, kernel forward
    triton_fused   the same, with ``fuse_residual=True``: each decoder layer's post-attention
             residual add happens inside the norm's kernel
    torch, reference, liger, ...   every ``LlamaRMSNorm`` replaced by that registered norm layer

Importing this module registers the builder, and (through :mod:`.norms`) the ``hf``, ``liger`` and
``triton_fused`` norm names.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..core.builders import (
    SpecError,
    check_eps,
    positive_int,
    register_builder,
    require_module,
    usable_norm,
)
from . import norms  # noqa: F401 - registers the hf, liger and triton_fused norms


class CausalLM(nn.Module):
    """``input_ids (B, S) int64 -> logits (B, S, vocab_size)``: a Hugging Face causal LM whose
    forward returns a tensor, as the experiment's checks (probe, export, reload) expect.

    ``state_dict`` keys are the HF model's with an ``lm.`` prefix (``lm.model.layers.0...``).
    """

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def _swap_norms(model: nn.Module, factory: Callable[..., nn.Module], eps: float) -> int:
    """Replace every ``LlamaRMSNorm`` of ``model`` by ``factory(N, eps=eps)``; returns how many.

    The new layer takes the old one's weight values (ones at construction), so no random number
    is drawn and every branch starts from the same weights.
    """
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    targets = [(n, m) for n, m in model.named_modules() if type(m) is LlamaRMSNorm]
    for name, old in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        new = factory(old.weight.shape[0], eps=eps)
        with torch.no_grad():
            new.weight.copy_(old.weight)
        setattr(parent, child, new)
    return len(targets)


def check_llama(
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    max_position_embeddings: int,
    norm: str,
    eps: float = 1e-6,
    attn_implementation: str = "sdpa",
    field: str = "net",
) -> None:
    """The value rules of :func:`build_llama`'s arguments (it runs them first; the training
    pre-check runs them alone): sizes integers >= 1, ``hidden_size`` a multiple of
    ``num_attention_heads`` and that of ``num_key_value_heads``, eps a finite number > 0, a known
    attention, transformers importable and a norm that can be built here. :class:`SpecError`
    names ``<field>.<argument>``."""
    check_eps(eps, field)
    sizes = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "max_position_embeddings": max_position_embeddings,
    }
    for name, value in sizes.items():
        positive_int(name, value, field)
    if hidden_size % num_attention_heads or num_attention_heads % num_key_value_heads:
        raise SpecError(
            f"{field}: hidden_size must be a multiple of num_attention_heads, and that of "
            f"num_key_value_heads (got {hidden_size}, {num_attention_heads}, "
            f"{num_key_value_heads})"
        )
    if attn_implementation not in ("sdpa", "eager"):
        raise SpecError(
            f"{field}.attn_implementation: must be 'sdpa' or 'eager' (got {attn_implementation!r})",
            key="attn_implementation",
        )
    require_module("transformers", "transformers", "builder=llama", f"{field}.builder")
    usable_norm(norm, f"{field}.norm")


def build_llama(
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    max_position_embeddings: int,
    norm: str,
    eps: float = 1e-6,
    attn_implementation: str = "sdpa",
) -> CausalLM:
    """A ``LlamaForCausalLM`` built from a config (float32 weights, no download), norm applied.

    ``2 * num_hidden_layers + 1`` RMSNorms (two per decoder layer, one final) run per forward.
    Every argument is checked first (:func:`check_llama`); unknown norms raise
    :class:`SpecError`.
    """
    sizes = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "max_position_embeddings": max_position_embeddings,
    }
    check_llama(**sizes, norm=norm, eps=eps, attn_implementation=attn_implementation)
    from transformers import LlamaConfig, LlamaForCausalLM

    factory = usable_norm(norm, "net.norm")
    config = LlamaConfig(
        **sizes,
        rms_norm_eps=float(eps),
        tie_word_embeddings=False,  # safetensors refuses shared tensors; Llama's default anyway
        attention_dropout=0.0,
        attn_implementation=attn_implementation,
    )
    lm = LlamaForCausalLM(config)
    if norm in ("triton", "triton_fused"):
        from ...integrations.transformers import patch

        # Not patch's global Inductor pass: model.inductor_fusion puts it in this run's compile.
        patch(lm, fuse_residual=norm == "triton_fused", inductor_fusion=False)
    elif norm != "hf":
        _swap_norms(lm, factory, float(eps))
    return CausalLM(lm)


register_builder("llama", build_llama, check=check_llama)

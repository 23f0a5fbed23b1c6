"""Llama-style decoder layers whose "residual add + post-attention norm" is one kernel pass.

A Llama decoder layer computes (transformers' source, statement for statement)::

    residual = h;  h = input_layernorm(h);  h = self_attn(h, ...)
    h = residual + h                         # read 2 tensors, write 1
    residual = h;  h = post_attention_layernorm(h)     # read it again
    h = mlp(h);  return residual + h

With ``fuse_residual=True`` the middle two lines become ``rmsnorm(attn, w, eps, residual=r)``,
which writes ``attn + r`` and normalises it in the same pass. The numbers are the layer's own:
the sum is rounded to the promoted dtype of its operands (as ``residual + h``), and the norm of
that rounded sum follows the norm's rule: Llama's (``rounding="llama"``: ``x * r`` rounded to the
input dtype, then the weight in the promoted dtype, inside the kernel) or Gemma's (``offset=1``,
one rounding). float64 states, which both normalise in float32, are added and
normalised unfused. Gemma (1) decoder layers have exactly Llama's forward.

Only classes whose ``forward`` is one of the two sources below (transformers 5.17's and the later
``cache=`` spelling) are fused; ``patch(model, fuse_residual=True)`` names any other decoder layer.
"""

from __future__ import annotations

import torch
from torch import nn

from ..function import rmsnorm

#: The decoder forward this module reproduces (type hints, decorators, comments aside), as
#: transformers 5.17 spells it ...
_DECODER_SOURCE = """
def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
            use_cache=False, position_embeddings=None, **kwargs):
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    hidden_states, _ = self.self_attn(
        hidden_states=hidden_states,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
        position_embeddings=position_embeddings,
        **kwargs,
    )
    hidden_states = residual + hidden_states
    residual = hidden_states
    hidden_states = self.post_attention_layernorm(hidden_states)
    hidden_states = self.mlp(hidden_states)
    hidden_states = residual + hidden_states
    return hidden_states
"""
#: ... and with the later ``cache=`` argument, statement for statement the same otherwise.
DECODER_SOURCES = (_DECODER_SOURCE, _DECODER_SOURCE.replace("past_key_values", "cache"))


def add_norm(norm: nn.Module, x: torch.Tensor, residual: torch.Tensor):
    """``(norm(residual + x), residual + x)`` for a norm patched with the llama or gemma rule.

    ``x``, ``residual``: ``[..., N]``; the sum has ``torch.promote_types`` of their dtypes.
    """
    dtype = torch.promote_types(x.dtype, residual.dtype)
    if dtype == torch.float64:
        h = residual + x  # both rules normalise float64 in float32: no single pass to fuse
        return norm(h), h
    if dtype not in (x.dtype, residual.dtype):  # bfloat16 + float16: neither holds the sum
        x, residual = x.to(dtype), residual.to(dtype)  # the exact upcast torch's add does
    # (a 16-bit x beside the float32 residual stream goes in as it is: the kernel upcasts it)
    weight = norm.weight
    rule = type(norm)._rmsnorm_kernel_rule
    if rule == "gemma":  # (h * r * (1 + weight)) in float32, rounded once: the kernel's rule
        return rmsnorm(x, weight, norm.eps, offset=1.0, residual=residual)
    if rule != "llama":
        raise TypeError(f"add_norm: {type(norm).__name__} is not a norm patched with a known rule")
    eps = norm.variance_epsilon
    if weight.dtype != torch.float64:  # Llama's two roundings, in the kernel
        return rmsnorm(x, weight, eps, residual=residual, rounding="llama")
    normed, h = rmsnorm(x, None, eps, residual=residual)  # x * r rounded to the input dtype
    return weight * normed, h


def fused_decoder_forward(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
    """The Llama decoder layer with the post-attention add and norm fused.

    ``hidden_states (B, S, hidden)``; every other argument is passed to ``self_attn`` by keyword,
    as the original forward does (``use_cache`` defaults to False there too).
    """
    kwargs.setdefault("use_cache", False)
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    attn, _ = self.self_attn(hidden_states=hidden_states, **kwargs)
    hidden_states, residual = add_norm(self.post_attention_layernorm, attn, residual)
    hidden_states = self.mlp(hidden_states)
    return residual + hidden_states

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

The fused pass calls the kernel, not the norm module, so it is taken only while the layer's
``post_attention_layernorm`` is a norm patched with the llama or gemma rule and no hook would see
its call (its own or a global module hook). Otherwise (a hook registered for activation capture,
the norm unpatched or replaced after ``patch``) the layer adds and calls the norm module as the
original forward does, with a warning the first time: the same numbers, the hooks run.
"""

from __future__ import annotations

import inspect
import warnings

import torch
from torch import nn
from torch.nn.modules import module as _module

from ..function import rmsnorm
from .patched_eps import ContractError, eps_of, named

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


#: The norm rules :func:`add_norm` reproduces.
FUSABLE_RULES = ("llama", "gemma")


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
    if rule not in FUSABLE_RULES:
        raise TypeError(f"add_norm: {type(norm).__name__} is not a norm patched with a known rule")
    attr = "eps" if rule == "gemma" else "variance_epsilon"
    eps = eps_of(norm, attr)
    try:
        if rule == "gemma":  # (h * r * (1 + weight)) in float32, rounded once: the kernel's rule
            return rmsnorm(x, weight, eps, offset=1.0, residual=residual)
        if weight.dtype != torch.float64:  # Llama's two roundings, in the kernel
            return rmsnorm(x, weight, eps, residual=residual, rounding="llama")
        normed, h = rmsnorm(x, None, eps, residual=residual)  # x * r rounded to the input dtype
    except ContractError as e:
        raise named(norm, attr, e) from None
    return weight * normed, h


#: Global module hooks (``nn.modules.module.register_module_forward_hook`` and kin): any of them
#: would see the norm module's call, which the fused pass skips.
_GLOBAL_HOOKS = tuple(
    getattr(_module, name)
    for name in (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
    )
    if hasattr(_module, name)
)
_HOOK_ATTRS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def unfusable_reason(norm) -> str | None:
    """Why :func:`add_norm` cannot stand in for calling ``norm`` now, or None."""
    if getattr(type(norm), "_rmsnorm_kernel_rule", None) not in FUSABLE_RULES:
        return f"it is not a norm patched with the llama or gemma rule ({type(norm).__name__})"
    if any(getattr(norm, name, None) for name in _HOOK_ATTRS) or any(_GLOBAL_HOOKS):
        return "a module hook would see its call"
    return None


#: Per decoder class: the names of its original forward's parameters after ``hidden_states``
#: that a caller may pass by position.
_POSITIONAL: dict[type, tuple[str, ...]] = {}


def _by_name(cls: type, args: tuple, kwargs: dict) -> None:
    """Put ``args`` (passed by position after ``hidden_states``) into ``kwargs`` under the names
    the original forward gives them, refusing what it would refuse."""
    if cls not in _POSITIONAL:
        original = getattr(cls, "_rmsnorm_kernel_original", cls)
        params = list(inspect.signature(original.forward).parameters.values())[2:]
        _POSITIONAL[cls] = tuple(
            p.name for p in params if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
    names = _POSITIONAL[cls]
    if len(args) > len(names):
        raise TypeError(
            f"{cls.__name__}.forward() takes {len(names) + 1} positional arguments after self "
            f"but {len(args) + 1} were given"
        )
    for name, value in zip(names, args, strict=False):
        if name in kwargs:
            raise TypeError(f"{cls.__name__}.forward() got multiple values for argument {name!r}")
        kwargs[name] = value


def fused_decoder_forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """The Llama decoder layer with the post-attention add and norm fused.

    ``hidden_states (B, S, hidden)``; the other arguments by keyword or, in the original
    forward's order, by position; they go to ``self_attn`` by keyword, as the original forward
    passes them (``use_cache`` defaults to False there too).
    """
    if args:
        _by_name(type(self), args, kwargs)
    kwargs.setdefault("use_cache", False)
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    attn, _ = self.self_attn(hidden_states=hidden_states, **kwargs)
    norm = self.post_attention_layernorm
    reason = unfusable_reason(norm)
    if reason is None:
        hidden_states, residual = add_norm(norm, attn, residual)
    else:  # the original statements: the norm module is called, its hooks run
        warnings.warn(
            f"rmsnorm_kernel fuse_residual: {type(self).__name__}'s post_attention_layernorm is "
            f"called unfused, as the original layer calls it, because {reason}",
            stacklevel=2,
        )
        residual = residual + attn
        hidden_states = norm(residual)
    hidden_states = self.mlp(hidden_states)
    return residual + hidden_states

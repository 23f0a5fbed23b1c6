"""Run the RMSNorm modules of a Hugging Face model on the Triton kernel: ``patch`` / ``unpatch``.

    from rmsnorm_kernel.integrations.transformers import patch
    n = patch(model)    # every RMSNorm module of the model now calls rmsnorm_kernel.rmsnorm

``patch`` changes each norm module's class, in place, to a subclass whose ``forward`` calls the
kernel. The module object, its ``weight`` Parameter, its hooks and its ``state_dict`` keys stay the
same, so optimizers, ``save_pretrained`` and ``from_pretrained`` are unaffected; ``unpatch``
restores the original classes.

A class is patched only when its math is one this file reproduces *exactly*, including where the
result is rounded. That is decided from the installed source, statement for statement (comments,
docstrings, type hints and decorators aside), against the two conventions below, so a class whose
code changes in a future transformers release is refused instead of approximated:

``llama``  (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, Qwen3RMSNorm, Phi3RMSNorm, ...)::

    h = x.float(); h = h * rsqrt(mean(h**2) + variance_epsilon)
    y = weight * h.to(x.dtype)          # rounded to x's dtype first, THEN times the weight

``gemma``  (GemmaRMSNorm, Gemma2RMSNorm, Gemma3RMSNorm, ...)::

    y = (x.float() * rsqrt(mean(x.float()**2) + eps) * (1 + weight.float())).type_as(x)

The kernel computes ``x * r * (offset + w)`` in float32 (float64 for float64 input) and rounds once
to ``x.dtype``. That is exactly gemma's rule (``offset=1``), and llama's when x is float32. For a
float16/bfloat16 x, llama rounds twice (``x*r`` to x's dtype, then the product with the weight in
the promoted dtype), so the kernel normalises without the weight and the weight is applied by the
same PyTorch multiplication. Both conventions compute in float32 even for float64 input; so does
the patch.

Not covered: any other class with "RMSNorm" in its name (an error names it, unless the caller
passes ``allow_unknown=True``, which leaves such modules as they are).
"""

from __future__ import annotations

import ast
import inspect
import logging
import numbers
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..function import rmsnorm
from .fused_residual import DECODER_SOURCES, fused_decoder_forward

__all__ = ["CONVENTIONS", "UnsupportedNormError", "convention_of", "patch", "unpatch"]

log = logging.getLogger("rmsnorm_kernel")


class UnsupportedNormError(TypeError):
    """A module looks like an RMSNorm, but its math is not one this patch reproduces exactly."""


# ---------------------------------------------------------------------------------------------
# The replacements. ``self`` is the original module, so eps and weight are read from it at call
# time (``variance_epsilon`` / ``eps``, whatever the config put there).


def _llama_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """``hidden_states [..., N]`` -> ``[..., N]`` in ``promote(weight.dtype, x.dtype)``."""
    weight = self.weight
    eps = self.variance_epsilon
    x_dtype = hidden_states.dtype
    if x_dtype == torch.float32 and weight.dtype != torch.float64:
        # x * r is already float32 and the product with the weight is rounded once, in float32:
        # the kernel's single rounding is the same rule, so it applies the weight itself.
        return rmsnorm(hidden_states, weight, eps)
    if x_dtype == torch.float64:
        # Llama computes in float32 whatever the input, then casts back before the weight.
        normed = rmsnorm(hidden_states.float(), None, eps).to(x_dtype)
    else:
        # x * r rounded to x's dtype, as Llama's ``.to(input_dtype)`` does before the weight.
        normed = rmsnorm(hidden_states, None, eps)
    return weight * normed


def _gemma_forward(self, x: torch.Tensor) -> torch.Tensor:
    """``x [..., N]`` -> ``[..., N]`` in ``x.dtype``; the scale is ``1 + weight``."""
    if x.dtype == torch.float64:
        # Gemma computes in float32 whatever the input, then casts back.
        return rmsnorm(x.float(), self.weight, self.eps, offset=1.0).to(x.dtype)
    return rmsnorm(x, self.weight, self.eps, offset=1.0)


@dataclass(frozen=True)
class Convention:
    """One exact RMSNorm rule: the source it must match and the kernel forward replacing it."""

    name: str
    source: str  # the methods (forward and any helper it calls) a class must have, verbatim
    eps_attr: str
    forward: Callable


_LLAMA_SOURCE = """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states.to(input_dtype)
"""

_GEMMA_SOURCE = """
def _norm(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

def forward(self, x):
    output = self._norm(x.float())
    output = output * (1.0 + self.weight.float())
    return output.type_as(x)
"""

CONVENTIONS: dict[str, Convention] = {
    "llama": Convention("llama", _LLAMA_SOURCE, "variance_epsilon", _llama_forward),
    "gemma": Convention("gemma", _GEMMA_SOURCE, "eps", _gemma_forward),
}

#: The families the tests build and check; others are patched when their source matches.
FAMILIES = {
    "LlamaRMSNorm": "llama",
    "MistralRMSNorm": "llama",
    "Qwen2RMSNorm": "llama",
    "Qwen3RMSNorm": "llama",
    "Phi3RMSNorm": "llama",
    "GemmaRMSNorm": "gemma",
    "Gemma2RMSNorm": "gemma",
    "Gemma3RMSNorm": "gemma",
}


# ---------------------------------------------------------------------------------------------
# Recognising a convention from source.


def _normalised(fn_node: ast.FunctionDef) -> str:
    """The AST of one method without decorators, type hints or docstring, as a string."""
    fn_node.decorator_list = []
    fn_node.returns = None
    args = fn_node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None
    body = fn_node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str) and len(body) > 1:
            fn_node.body = body[1:]
    return ast.dump(fn_node)


def _methods(source: str) -> dict[str, str]:
    tree = ast.parse(textwrap.dedent(source))
    return {node.name: _normalised(node) for node in tree.body if isinstance(node, ast.FunctionDef)}


_EXPECTED = {name: _methods(c.source) for name, c in CONVENTIONS.items()}
_CLASS_CONVENTION: dict[type, str | None] = {}


def _method_source(cls: type, name: str) -> str | None:
    fn = getattr(cls, name, None)
    if fn is None:
        return None
    try:
        got = _methods(inspect.getsource(fn))
    except (OSError, TypeError, SyntaxError):  # no source file, a builtin, or a lambda
        return None
    return got.get(name)


_EXPECTED_DECODERS = [_methods(source)["forward"] for source in DECODER_SOURCES]
_DECODER_FUSABLE: dict[type, bool] = {}


def decoder_is_fusable(cls: type) -> bool:
    """Whether ``cls.forward`` is a Llama decoder forward that :mod:`.fused_residual` rewires."""
    if cls not in _DECODER_FUSABLE:
        _DECODER_FUSABLE[cls] = _method_source(cls, "forward") in _EXPECTED_DECODERS
    return _DECODER_FUSABLE[cls]


def convention_of(cls: type) -> str | None:
    """The name of the convention whose source ``cls`` has, or ``None``."""
    if cls not in _CLASS_CONVENTION:
        found = None
        for name, expected in _EXPECTED.items():
            if all(_method_source(cls, m) == dump for m, dump in expected.items()):
                found = name
                break
        _CLASS_CONVENTION[cls] = found
    return _CLASS_CONVENTION[cls]


# ---------------------------------------------------------------------------------------------
# Patched classes: one subclass per original class, so isinstance checks and the "RMSNorm" in the
# class name (which transformers' weight initialisation looks for) still hold.

_KERNEL_CLASSES: dict[type, type] = {}


def _kernel_class(cls: type, forward: Callable, rule: str) -> type:
    """The subclass of ``cls`` whose ``forward`` is ``forward`` (made once per class).

    ``rule``: the convention's name for norms (``_rmsnorm_kernel_rule``, read by the fused
    residual path), "fused residual" for decoder layers.
    """
    if cls not in _KERNEL_CLASSES:
        _KERNEL_CLASSES[cls] = type(
            f"Kernel{cls.__name__}",
            (cls,),
            {
                "forward": forward,
                "__module__": __name__,
                "__doc__": f"{cls.__name__} running rmsnorm_kernel ({rule}).",
                "_rmsnorm_kernel_original": cls,
                "_rmsnorm_kernel_rule": rule,
            },
        )
    return _KERNEL_CLASSES[cls]


def _is_patched(module: nn.Module) -> bool:
    return "_rmsnorm_kernel_original" in type(module).__dict__


def _looks_like_rmsnorm(module: nn.Module) -> bool:
    return "rmsnorm" in type(module).__name__.lower()


def _check_attributes(path: str, module: nn.Module, convention: Convention) -> None:
    cls = type(module).__name__
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        got = None if weight is None else tuple(weight.shape)
        raise UnsupportedNormError(f"{cls} at '{path}': weight must be a 1-dim tensor (got {got})")
    eps = getattr(module, convention.eps_attr, None)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise UnsupportedNormError(
            f"{cls} at '{path}': {convention.eps_attr} must be a real number (got {eps!r})"
        )


def _norm_plan(path: str, module: nn.Module, allow_unknown: bool) -> Convention | None:
    """The convention ``module`` will be patched with; None to leave it (allow_unknown)."""
    name = convention_of(type(module))
    if name is None:
        cls = type(module)
        if allow_unknown:
            return None
        known = FAMILIES.get(cls.__name__)
        why = (
            f"its source no longer matches the {known} convention this patch reproduces"
            if known
            else "its math is not one of the conventions this patch reproduces exactly "
            f"({', '.join(CONVENTIONS)})"
        )
        raise UnsupportedNormError(
            f"{cls.__module__}.{cls.__qualname__} at '{path}': {why}; pass "
            "allow_unknown=True to leave such modules unpatched"
        )
    _check_attributes(path, module, CONVENTIONS[name])
    return CONVENTIONS[name]


def _check_fusable(path: str, layer: nn.Module, rule_norms: set[int]) -> None:
    cls = type(layer)
    if not decoder_is_fusable(cls):
        raise UnsupportedNormError(
            f"fuse_residual: {cls.__module__}.{cls.__qualname__} at '{path}' is not a Llama-style "
            "decoder layer (its forward is not the one fused_residual rewires); pass "
            "allow_unknown=True to leave such layers unfused"
        )
    norm = getattr(layer, "post_attention_layernorm", None)
    if id(norm) not in rule_norms:
        raise UnsupportedNormError(
            f"fuse_residual: '{path}.post_attention_layernorm' is not a norm patched with the "
            "llama or gemma rule, which the fused add + norm reproduces"
        )


def patch(model: nn.Module, *, fuse_residual: bool = False, allow_unknown: bool = False) -> int:
    """Make every RMSNorm module of ``model`` call ``rmsnorm_kernel.rmsnorm``, in place.

    Args:
        model: any ``torch.nn.Module`` (a ``PreTrainedModel``, or a part of one).
        fuse_residual: also rewire every decoder layer (class name ending in ``DecoderLayer``) to
            add the attention output to the residual inside the post-attention norm's kernel
            (:mod:`.fused_residual`): Llama, Mistral, Qwen2, Qwen3 and Gemma layers.
        allow_unknown: leave modules with "RMSNorm" in their class name whose math is not a
            convention reproduced here (and, with ``fuse_residual``, decoder layers that are not
            Llama-style) as they are, logged, instead of raising.

    Returns:
        How many modules were patched now: norms, plus decoder layers with ``fuse_residual``
        (already patched ones are not counted again).

    Raises:
        UnsupportedNormError: a module looks like an RMSNorm (class name) but its source is not
            one of :data:`CONVENTIONS`, or its weight/eps are not what that convention reads; or
            a decoder layer cannot be fused. Raised before any module is changed.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    todo: list[tuple[nn.Module, Callable, str]] = []
    skipped: list[str] = []
    rule_norms: set[int] = set()  # norms that are, or will be, patched with a known rule
    for path, module in model.named_modules():
        if not _looks_like_rmsnorm(module):
            continue
        if _is_patched(module):
            rule_norms.add(id(module))
            continue
        convention = _norm_plan(path, module, allow_unknown)
        if convention is None:
            skipped.append(f"{type(module).__name__} at '{path}'")
            continue
        rule_norms.add(id(module))
        todo.append((module, convention.forward, convention.name))
    if fuse_residual:
        for path, layer in model.named_modules():
            if _is_patched(layer) or not type(layer).__name__.endswith("DecoderLayer"):
                continue
            try:
                _check_fusable(path, layer, rule_norms)
            except UnsupportedNormError:
                if not allow_unknown:
                    raise
                skipped.append(f"{type(layer).__name__} at '{path}' (not fused)")
                continue
            todo.append((layer, fused_decoder_forward, "fused residual"))
    for module, forward, what in todo:
        module.__class__ = _kernel_class(type(module), forward, what)
    if skipped:
        log.warning("patch left %d module(s) unpatched: %s", len(skipped), "; ".join(skipped))
    return len(todo)


def unpatch(model: nn.Module) -> int:
    """Restore the original class of every module :func:`patch` changed; returns how many."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    count = 0
    for module in model.modules():
        if _is_patched(module):
            module.__class__ = type(module)._rmsnorm_kernel_original
            count += 1
    return count

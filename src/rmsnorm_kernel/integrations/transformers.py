"""Run the RMSNorm modules of a Hugging Face model on the Triton kernel: ``patch`` / ``unpatch``.

    from rmsnorm_kernel.integrations.transformers import patch
    n = patch(model)    # every RMSNorm module of the model now calls rmsnorm_kernel.rmsnorm

``patch`` changes each norm module's class, in place, to a subclass whose ``forward`` calls the
kernel. The module object, its ``weight`` Parameter, its hooks and its ``state_dict`` keys stay the
same, so optimizers, ``save_pretrained`` and ``from_pretrained`` are unaffected; ``unpatch``
restores the original classes.

A class is patched only when its math is one this file reproduces *exactly*, including where the
result is rounded. That is decided from the installed source, statement for statement (comments,
docstrings, type hints and decorators aside), against the conventions below, so a class whose
code changes in a future transformers release is refused instead of approximated. Classes are
recognised by that source whatever their name (T5's is ``T5LayerNorm``):

``llama``  (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, Qwen3RMSNorm, Phi3RMSNorm, ...)::

    h = x.float(); h = h * rsqrt(mean(h**2) + variance_epsilon)
    y = weight * h.to(x.dtype)          # rounded to x's dtype first, THEN times the weight

``gemma``  (GemmaRMSNorm, Gemma2RMSNorm, Gemma3RMSNorm, ...)::

    y = (x.float() * rsqrt(mean(x.float()**2) + eps) * (1 + weight.float())).type_as(x)

``t5``  (T5LayerNorm, and its copies: MT5, UMT5, LongT5, SwitchTransformers, Pop2Piano, ...)::

    h = x * rsqrt(mean(x.float()**2) + variance_epsilon)     # float32 (x promoted by r)
    y = weight * (h.to(weight.dtype) if weight is half else h)

  reproduced by :func:`_t5_forward` (below); a float64 input, which T5 multiplies in float64 by a
  float32 ``r``, is refused when the module runs.

``torch``  (``torch.nn.RMSNorm`` and subclasses that keep its forward)::

    y = F.rms_norm(x, normalized_shape, weight, eps)

  run by the drop-in :func:`rmsnorm_kernel.rms_norm` (the same rule, dtypes, autocast rule and
  eps: None, or any finite value). ``rmsnorm_kernel.RMSNorm`` (a ``torch.nn.RMSNorm`` that already
  runs the kernels) is left as it is and not counted.

The kernel's default rule computes ``x * r * (offset + w)`` in float32 (float64 for float64 input)
and rounds once to ``x.dtype``: exactly gemma's rule (``offset=1``). Llama rounds twice (``x*r`` to
x's dtype, then the product with the weight in the promoted dtype): the kernel's
``rounding="llama"`` does exactly that, in the same single forward and backward launches. Both
conventions compute in float32 even for float64 input; so does the patch (a float64 input or
weight normalises in float32 without the weight, which PyTorch then applies).

Refused before anything changes (:class:`UnsupportedNormError`, naming the module's path in the
model): any other class with "RMSNorm" in its name (unless the caller passes
``allow_unknown=True``, which leaves such modules as they are, logged), and a module whose eps is
not what the kernel takes (a finite real > 0 that fits in float32: ``rms_norm_eps=0`` is refused
at patch time, not at the first forward). Other modules whose forward calls ``rsqrt`` are left as
they are and logged.

Patched modules pickle (``torch.save``, ``copy.deepcopy``): the kernel subclass reduces to its
original class, importable by name, plus the rule; loading makes the same kernel subclass again.
"""

from __future__ import annotations

import ast
import inspect
import logging
import math
import numbers
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..contract import FLOAT32_MAX, FLOAT32_TINY
from ..function import rmsnorm
from ..module import RMSNorm, rms_norm
from . import instance_forward
from .fused_residual import DECODER_SOURCES, FUSABLE_RULES, fused_decoder_forward
from .patched_eps import ContractError, eps_of, named

__all__ = [
    "CONVENTIONS",
    "UnsupportedNormError",
    "convention_of",
    "is_patched",
    "patch",
    "unpatch",
]

log = logging.getLogger("rmsnorm_kernel")


class UnsupportedNormError(TypeError):
    """A module looks like an RMSNorm, but its math is not one this patch reproduces exactly."""


# ---------------------------------------------------------------------------------------------
# The replacements. ``self`` is the original module, so eps and weight are read from it at call
# time (``variance_epsilon`` / ``eps``, whatever the config put there).


def _llama_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """``hidden_states [..., N]`` -> ``[..., N]`` in ``promote(weight.dtype, x.dtype)``."""
    weight = self.weight
    eps = eps_of(self, "variance_epsilon")
    x_dtype = hidden_states.dtype
    try:
        if x_dtype != torch.float64 and weight.dtype != torch.float64:
            # One launch each way: the kernel rounds x * r to x's dtype, then multiplies by the
            # weight in the promoted dtype, exactly as Llama's ``weight * h.to(input_dtype)``.
            return rmsnorm(hidden_states, weight, eps, rounding="llama")
        if x_dtype == torch.float64:
            # Llama computes in float32 whatever the input, then casts back before the weight.
            normed = rmsnorm(hidden_states.float(), None, eps).to(x_dtype)
        else:
            # A float64 weight: x * r rounded to x's dtype, then the product in float64.
            normed = rmsnorm(hidden_states, None, eps)
    except ContractError as e:
        raise named(self, "variance_epsilon", e) from None
    return weight * normed


def _gemma_forward(self, x: torch.Tensor) -> torch.Tensor:
    """``x [..., N]`` -> ``[..., N]`` in ``x.dtype``; the scale is ``1 + weight``."""
    eps = eps_of(self, "eps")
    try:
        if x.dtype == torch.float64:
            # Gemma computes in float32 whatever the input, then casts back.
            return rmsnorm(x.float(), self.weight, eps, offset=1.0).to(x.dtype)
        return rmsnorm(x, self.weight, eps, offset=1.0)
    except ContractError as e:
        raise named(self, "eps", e) from None


_HALF = (torch.float16, torch.bfloat16)


def _t5_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """``hidden_states [..., N]`` -> ``[..., N]``: T5's rule (see the module docstring).

    ``h = x * r`` is float32 for float16/bfloat16/float32 x (``r`` is float32, x promotes to it).
    A half weight: ``h`` rounded to the weight's dtype, then the product in that dtype. A float32
    weight: the product in float32, one more rounding: the kernel's ``x * r * w`` on float32 x.
    A float64 weight: the float32 ``h`` times it in float64.
    """
    weight = self.weight
    eps = eps_of(self, "variance_epsilon")
    x_dtype, w_dtype = hidden_states.dtype, weight.dtype
    if x_dtype == torch.float64:
        raise TypeError(
            f"{type(self).__name__} patched with the t5 rule: float64 input is refused (T5 "
            "multiplies float64 x by a float32 r, which the kernel does not reproduce); "
            "unpatch the model or run it in float32"
        )
    try:
        if w_dtype in _HALF:
            if x_dtype == w_dtype:  # float32 x * r rounded once to the weight's dtype
                normed = rmsnorm(hidden_states, None, eps)
            else:  # x * r in float32, then PyTorch's rounding to the weight's dtype
                normed = rmsnorm(hidden_states.float(), None, eps).to(w_dtype)
            return weight * normed
        x32 = hidden_states.float()  # exact for half x; the same tensor for float32 x
        if w_dtype == torch.float32:
            return rmsnorm(x32, weight, eps)
        return weight * rmsnorm(x32, None, eps)
    except ContractError as e:
        raise named(self, "variance_epsilon", e) from None


def _torch_forward(self, x: torch.Tensor) -> torch.Tensor:
    """``x [..., *normalized_shape]`` -> same shape: ``F.rms_norm``'s rule through its drop-in
    :func:`rmsnorm_kernel.rms_norm` (the same dtypes, autocast rule and eps, None included)."""
    return rms_norm(x, self.normalized_shape, self.weight, self.eps)


@dataclass(frozen=True)
class Convention:
    """One exact RMSNorm rule: the source it must match and the kernel forward replacing it."""

    name: str
    source: str  # the methods (forward and any helper it calls) a class must have, verbatim
    eps_attr: str
    forward: Callable
    #: Its own check of the module's attributes, ``(path, module)``; None: a 1-dim weight and an
    #: eps the kernel's tutorial rule takes (:func:`_check_attributes`).
    attributes: Callable | None = None


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

_T5_SOURCE = """
def forward(self, hidden_states):
    variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    if self.weight.dtype in [torch.float16, torch.bfloat16]:
        hidden_states = hidden_states.to(self.weight.dtype)
    return self.weight * hidden_states
"""


def _check_torch_attributes(path: str, module: nn.Module) -> None:
    """``torch.nn.RMSNorm``'s attributes as its drop-in takes them: eps None or a finite real
    (any sign, as F.rms_norm), a weight of normalized_shape or none."""
    cls = type(module).__name__
    eps = module.eps
    if eps is not None and (
        isinstance(eps, bool)
        or not isinstance(eps, numbers.Real)
        or not (math.isfinite(eps) and abs(eps) <= FLOAT32_MAX)
    ):
        raise UnsupportedNormError(
            f"{cls} at '{path}': eps must be None or a finite real that fits in float32 "
            f"(got {eps!r})"
        )
    weight, shape = module.weight, tuple(module.normalized_shape)
    if weight is not None and tuple(weight.shape) != shape:
        raise UnsupportedNormError(
            f"{cls} at '{path}': weight must have normalized_shape {shape} "
            f"(got {tuple(weight.shape)})"
        )


_TORCH_SOURCE = """
def forward(self, x):
    return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
"""

CONVENTIONS: dict[str, Convention] = {
    "llama": Convention("llama", _LLAMA_SOURCE, "variance_epsilon", _llama_forward),
    "gemma": Convention("gemma", _GEMMA_SOURCE, "eps", _gemma_forward),
    "t5": Convention("t5", _T5_SOURCE, "variance_epsilon", _t5_forward),
    "torch": Convention("torch", _TORCH_SOURCE, "eps", _torch_forward, _check_torch_attributes),
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
    "T5LayerNorm": "t5",
    "RMSNorm": "torch",  # torch.nn.RMSNorm
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

_KERNEL_CLASSES: dict[tuple[type, str], type] = {}
#: ``_rmsnorm_kernel_rule`` of patched decoder layers (norms carry their convention's name).
FUSED_RULE = "fused residual"


def _rule_forward(rule: str) -> Callable:
    if rule == FUSED_RULE:
        return fused_decoder_forward
    if rule in CONVENTIONS:
        return CONVENTIONS[rule].forward
    raise ValueError(f"unknown rmsnorm_kernel rule {rule!r}")


def _reduce_patched(self, protocol):
    """Pickle a patched module as its original class (importable by name) and its rule; loading
    (:func:`_rebuild_patched`) makes the same kernel subclass again in the loading process."""
    cls = type(self)
    return (
        _rebuild_patched,
        (cls._rmsnorm_kernel_original, cls._rmsnorm_kernel_rule),
        self.__getstate__(),
    )


def _rebuild_patched(original: type, rule: str) -> nn.Module:
    """An empty instance of ``original``'s kernel subclass for ``rule``; pickle then restores its
    state (``nn.Module.__setstate__``)."""
    module = original.__new__(original)
    module.__class__ = _kernel_class(original, rule)
    return module


def _patched_extra_repr(self) -> str:
    """The original ``extra_repr`` and the rule: a patched module shows that it is one."""
    cls = type(self)
    base = cls._rmsnorm_kernel_original.extra_repr(self)
    tag = f"rmsnorm_kernel={cls._rmsnorm_kernel_rule}"
    return f"{base}, {tag}" if base else tag


def _kernel_class(cls: type, rule: str) -> type:
    """The subclass of ``cls`` whose ``forward`` runs the kernel by ``rule`` (made once).

    ``rule``: the convention's name for norms (``_rmsnorm_kernel_rule``, read by the fused
    residual path), :data:`FUSED_RULE` for decoder layers. The subclass keeps ``cls``'s name:
    code that finds classes by their exact name (``_no_split_modules`` in accelerate's device
    maps, the Trainer's ``fsdp_transformer_layer_cls_to_wrap``) still finds them. Its ``repr``
    adds ``rmsnorm_kernel=<rule>``, and :func:`is_patched` tells it apart. It pickles through
    :func:`_reduce_patched`, so a patched model can be saved with ``torch.save``, pickled and
    deep-copied.
    """
    key = (cls, rule)
    if key not in _KERNEL_CLASSES:
        _KERNEL_CLASSES[key] = type(
            cls.__name__,
            (cls,),
            {
                "forward": _rule_forward(rule),
                "extra_repr": _patched_extra_repr,
                "__module__": __name__,
                "__qualname__": cls.__qualname__,
                "__doc__": f"{cls.__name__} running rmsnorm_kernel ({rule}).",
                "__reduce_ex__": _reduce_patched,
                "_rmsnorm_kernel_original": cls,
                "_rmsnorm_kernel_rule": rule,
            },
        )
    return _KERNEL_CLASSES[key]


def is_patched(module: nn.Module) -> bool:
    """Whether :func:`patch` changed ``module`` (a norm or a fused decoder layer), also when
    another library subclassed its class since (FSDP2's ``fully_shard``, parametrizations)."""
    return hasattr(type(module), "_rmsnorm_kernel_original")


def _is_patched(module: nn.Module) -> bool:
    """Patched, and its class is still the kernel subclass itself (:func:`unpatch` can restore
    it)."""
    return "_rmsnorm_kernel_original" in type(module).__dict__


#: The modules of the drop-in classes (every class there runs the kernels).
_DROPINS = __name__.rsplit(".", 1)[0] + "."


def _is_dropin(module: nn.Module) -> bool:
    """This package's own norms (``rmsnorm_kernel.RMSNorm`` and the Liger / Apex / flash-attn
    drop-ins): they run the kernels already."""
    return isinstance(module, RMSNorm) or type(module).__module__.startswith(_DROPINS)


_CALLS_RSQRT: dict[type, bool] = {}


def _looks_like_rmsnorm(module: nn.Module) -> bool:
    """Named like an RMSNorm or a family's class (refused unless it matches), or any class with a
    convention's source (T5LayerNorm's copies: LongT5LayerNorm, ...)."""
    cls = type(module)
    name = cls.__name__
    return "rmsnorm" in name.lower() or name in FAMILIES or convention_of(cls) is not None


def _calls_rsqrt(cls: type) -> bool:
    """Whether ``cls.forward``'s source calls ``rsqrt``: an RMSNorm-like module, worth a log line
    when it is left unpatched."""
    if cls not in _CALLS_RSQRT:
        try:
            source = inspect.getsource(cls.forward)
        except (AttributeError, OSError, TypeError):
            source = ""
        _CALLS_RSQRT[cls] = "rsqrt" in source
    return _CALLS_RSQRT[cls]


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
    if not (math.isfinite(eps) and FLOAT32_TINY <= eps <= FLOAT32_MAX):
        raise UnsupportedNormError(
            f"{cls} at '{path}': {convention.eps_attr} must be a finite real > 0 that fits in "
            f"float32, as the kernel requires (got {eps!r}; at least {FLOAT32_TINY:.5g}, "
            "float32's smallest normal value; in a config: rms_norm_eps / layer_norm_epsilon)"
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
    convention = CONVENTIONS[name]
    if convention.attributes is not None:
        convention.attributes(path, module)
    else:
        _check_attributes(path, module, convention)
    return convention


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


def patch(
    model: nn.Module,
    *,
    fuse_residual: bool = False,
    allow_unknown: bool = False,
    inductor_fusion: bool = True,
) -> int:
    """Make every RMSNorm module of ``model`` call ``rmsnorm_kernel.rmsnorm``, in place.

    Args:
        model: any ``torch.nn.Module`` (a ``PreTrainedModel``, or a part of one).
        fuse_residual: also rewire every decoder layer (class name ending in ``DecoderLayer``) to
            add the attention output to the residual inside the post-attention norm's kernel
            (:mod:`.fused_residual`): Llama, Mistral, Qwen2, Qwen3 and Gemma layers.
        allow_unknown: leave modules with "RMSNorm" in their class name whose math is not a
            convention reproduced here (and, with ``fuse_residual``, decoder layers that are not
            Llama-style) as they are, logged, instead of raising.
        inductor_fusion: also install :mod:`rmsnorm_kernel.inductor_fusion`'s pass (a global
            Inductor setting, logged at INFO; a pass set there before keeps running first), so
            that under ``torch.compile`` the residual add before each norm, the gradient
            accumulation after its backward, the sum of the projections' input gradients that
            forms its dy, and autocast's casts around it run inside the norm's kernels
            (compiled HF Llama on an H200: 0.996x / 0.994x compiled HF's speed without the
            gradient sums, 1.002x / 1.004x with them, at hidden 4096 / 2048). No effect on
            eager execution. ``False`` leaves
            Inductor's settings alone; ``inductor_fusion.disable()`` removes the pass later.

    Returns:
        How many modules were patched now: norms, plus decoder layers with ``fuse_residual``
        (already patched ones are not counted again).

    Raises:
        UnsupportedNormError: a module looks like an RMSNorm (class name) but its source is not
            one of :data:`CONVENTIONS`, or its weight/eps are not what that convention reads
            (eps must be a finite real > 0 that fits in float32; the message names the module's
            path in ``model``); or a decoder layer cannot be fused. Raised before any module is
            changed. Modules left as they are (``allow_unknown``, or not named RMSNorm but
            calling ``rsqrt``) are logged at WARNING on logger ``rmsnorm_kernel``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    switches = {
        "fuse_residual": fuse_residual,
        "allow_unknown": allow_unknown,
        "inductor_fusion": inductor_fusion,
    }
    for name, value in switches.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False (got {value!r})")
    todo: list[tuple[nn.Module, str]] = []
    skipped: list[str] = []
    rule_norms: set[int] = set()  # norms that are, or will be, patched with a fusable rule
    for path, module in model.named_modules():
        if is_patched(module):
            if type(module)._rmsnorm_kernel_rule in FUSABLE_RULES:
                rule_norms.add(id(module))
            continue
        if _is_dropin(module):  # this package's own modules: the kernel already
            continue
        if not _looks_like_rmsnorm(module):
            if _calls_rsqrt(type(module)):
                skipped.append(f"{type(module).__name__} at '{path}' (RMSNorm-like: calls rsqrt)")
            continue
        convention = _norm_plan(path, module, allow_unknown)
        if convention is None:
            skipped.append(f"{type(module).__name__} at '{path}'")
            continue
        if (why := instance_forward.problem(module)) is not None:
            if not allow_unknown:
                raise UnsupportedNormError(
                    f"{type(module).__name__} at '{path}': {why} (allow_unknown=True leaves it)"
                )
            skipped.append(f"{type(module).__name__} at '{path}' (forward set on the instance)")
            continue
        if convention.name in FUSABLE_RULES:
            rule_norms.add(id(module))
        todo.append((module, convention.name))
    if fuse_residual:
        for path, layer in model.named_modules():
            if is_patched(layer) or not type(layer).__name__.endswith("DecoderLayer"):
                continue
            try:
                _check_fusable(path, layer, rule_norms)
                if (why := instance_forward.problem(layer)) is not None:
                    raise UnsupportedNormError(
                        f"fuse_residual: {type(layer).__name__} at '{path}': {why}"
                    )
            except UnsupportedNormError:
                if not allow_unknown:
                    raise
                skipped.append(f"{type(layer).__name__} at '{path}' (not fused)")
                continue
            todo.append((layer, FUSED_RULE))
    for module, rule in todo:
        original = type(module)
        module.__class__ = _kernel_class(original, rule)
        instance_forward.rebind(module, original)  # accelerate's hook: runs the kernel now
    if inductor_fusion:
        from .. import inductor_fusion as fusion  # here: it imports Inductor (about a second)

        fusion.enable()
    if skipped:
        log.warning("patch left %d module(s) unpatched: %s", len(skipped), "; ".join(skipped))
    return len(todo)


def unpatch(model: nn.Module) -> int:
    """Restore the original class of every module :func:`patch` changed; returns how many.

    Raises:
        UnsupportedNormError: a patched module's class was subclassed since by another library
            (FSDP2's ``fully_shard``, ``torch.nn.utils.parametrize``), so the kernel subclass is
            no longer its own class and cannot be swapped back. Raised, naming every such
            module, before any module is changed: unpatch before wrapping the model.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    hidden = [
        f"'{path}' ({type(m).__qualname__})"
        for path, m in model.named_modules()
        if is_patched(m) and not _is_patched(m)
    ]
    if hidden:
        raise UnsupportedNormError(
            f"unpatch: {len(hidden)} patched module(s) had their class subclassed since by "
            f"another library, which hides the patch: {', '.join(hidden)}; unpatch before "
            "wrapping the model (fully_shard, parametrizations), or build it again"
        )
    count = 0
    for module in model.modules():
        if _is_patched(module):
            kernel_class = type(module)
            module.__class__ = kernel_class._rmsnorm_kernel_original
            instance_forward.rebind(module, kernel_class)
            count += 1
    return count

"""Modules whose ``forward`` is set on the instance, which a class swap alone does not reach.

``patch`` swaps a module's class, so ``module(x)`` runs the kernel subclass's ``forward``. A
``forward`` set on the instance takes precedence over the class's. accelerate's hooks
(``add_hook_to_module``: ``device_map="auto"``, CPU / disk offload) set one that calls
``module._old_forward``, the original class's ``forward`` bound to the module; that one is rebound
to the new class's ``forward`` on each swap, both ways, so the hook keeps running around the
kernel. Any other instance-level ``forward`` is refused by ``patch`` (naming the module): the
class swap would otherwise leave the module running its original code while ``is_patched`` says
it does not.
"""

from __future__ import annotations

import types

from torch import nn


def _bound_class_forward(module: nn.Module, cls: type) -> bool:
    """Whether ``module._old_forward`` is ``cls.forward`` bound to ``module``."""
    old = vars(module).get("_old_forward")
    return (
        isinstance(old, types.MethodType)
        and old.__self__ is module
        and old.__func__ is getattr(cls, "forward", None)
    )


def problem(module: nn.Module) -> str | None:
    """Why swapping ``module``'s class would not change what ``module(x)`` runs, or None."""
    if "forward" not in vars(module) or _bound_class_forward(module, type(module)):
        return None
    return (
        "its forward is set on the instance (a wrapper other than accelerate's hooks), which the "
        "class patch cannot reach; patch before wrapping it"
    )


def rebind(module: nn.Module, old_cls: type) -> None:
    """After ``module``'s class changed from ``old_cls``: an accelerate hook's ``_old_forward``
    (``old_cls.forward`` bound to the module) becomes the new class's ``forward``."""
    if _bound_class_forward(module, old_cls):
        module._old_forward = types.MethodType(type(module).forward, module)

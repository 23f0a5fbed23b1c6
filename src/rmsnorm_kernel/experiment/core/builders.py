"""Allow-lists of the nets and norms an experiment can build, by plain name.

A net is described by a *spec*: plain JSON data, ``{"builder": "mlp", "in_features": 32,
"hidden_features": 257, "out_features": 8, "norm": "triton", "eps": 1e-06}``. Training builds
the net from its config through :func:`build_net` (the config's ``_target_``), and a checkpoint
stores the same spec, so reloading a file runs exactly the code that trained it, looked up here:

- ``builder`` must be a name registered with :func:`register_builder`;
- ``norm`` (for builders that take one) must be registered with :func:`register_norm`;
- every other value is data: strings, numbers, booleans, ``None``, lists and objects of those,
  with no key starting with ``_`` (so Hydra-style ``_target_`` entries are refused outright).

A builder may register its value rules (``register_builder(name, builder, check=...)``), a
function of the same arguments that the builder runs first; a norm may register what it needs
here (``register_norm(name, factory, available=...)``: an optional package). :func:`check_values`
runs both without building anything, so the training pre-check refuses a value with the very
rule the build would apply (``model.net.hidden_features: must be an integer >= 1 (got 0)``).

Nothing read from a file is ever imported, called by name or passed to ``hydra.utils.instantiate``:
names only select entries of these two dicts. Each model's module adds its own entries
(``register_builder("mlp", build_mlp)`` in ``mlp.net``, ``"llama"`` in ``lm.net``);
:data:`PROVIDERS` lists those modules, imported (by these fixed names) before a name is declared
unknown, so training and ``reload`` find them without importing them first.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

import rmsnorm_kernel

from .norms import ReferenceRMSNorm

#: ``name -> factory(normalized_shape, eps=...) -> nn.Module``: the norm branches.
NORMS: dict[str, Callable[..., nn.Module]] = {
    "reference": ReferenceRMSNorm,
    "torch": nn.RMSNorm,
    "triton": rmsnorm_kernel.RMSNorm,
}

#: ``name -> builder(**args) -> nn.Module``: the nets a spec can name.
BUILDERS: dict[str, Callable[..., nn.Module]] = {}
#: ``name -> check(**args, field=...)``: a builder's value rules, which the builder runs first.
CHECKS: dict[str, Callable[..., None]] = {}
#: ``name -> available(field)``: raises :class:`SpecError` where the norm cannot be built (its
#: optional package is missing); its factory runs the same function first.
AVAILABLE: dict[str, Callable[[str], None]] = {}

#: Modules that register builders or norms when imported (fixed names, never read from a file):
#: imported the first time a name is not found, so ``reload`` knows every model the repo trains.
PROVIDERS: list[str] = ["rmsnorm_kernel.experiment.mlp.net", "rmsnorm_kernel.experiment.lm.net"]
_provider_errors: dict[str, str] = {}


class SpecError(ValueError):
    """A net spec names something outside the allow-lists or holds a non-data value.

    ``key``: the argument whose value broke its rule (``"hidden_features"``), when one did."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def register_builder(
    name: str, builder: Callable[..., nn.Module], check: Callable[..., None] | None = None
) -> None:
    """Allow ``{"builder": name, ...}`` specs; ``builder(**args)`` must return an ``nn.Module``.

    ``check(**args, field=...)``, when given, raises :class:`SpecError` (naming ``field`` and the
    argument) for a value ``builder`` would refuse; ``builder`` must run it first."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"builder name must be an identifier (got {name!r})")
    BUILDERS[name] = builder
    if check is not None:
        CHECKS[name] = check


def register_norm(
    name: str, factory: Callable[..., nn.Module], available: Callable[[str], None] | None = None
) -> None:
    """Allow ``"norm": name`` in specs; ``factory(normalized_shape, eps=...)`` builds the layer.

    ``available(field)``, when given, raises :class:`SpecError` naming ``field`` where the layer
    cannot be built (a missing optional package); ``factory`` must run it first."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"norm name must be an identifier (got {name!r})")
    NORMS[name] = factory
    if available is not None:
        AVAILABLE[name] = available


def _load_providers() -> None:
    for module in PROVIDERS:
        try:
            importlib.import_module(module)
        except ImportError as e:  # reported with the unknown name, see _lookup
            _provider_errors[module] = f"{type(e).__name__}: {e}"


def _lookup(table: dict[str, Any], kind: str, field: str, name: Any) -> Any:
    if isinstance(name, str) and name not in table:
        _load_providers()
    if not isinstance(name, str) or name not in table:
        missing = "".join(f"; {m} not importable ({why})" for m, why in _provider_errors.items())
        raise SpecError(f"{field}: unknown {kind} {name!r}; allowed: {sorted(table)}{missing}")
    return table[name]


def resolve_norm(name: Any, field: str = "norm") -> Callable[..., nn.Module]:
    """The registered norm factory called ``name``; :class:`SpecError` naming ``field`` if none."""
    return _lookup(NORMS, "norm", field, name)


def kernels_runnable(field: str) -> None:
    """:class:`SpecError` naming ``field`` where the Triton kernels cannot run: compiled kernels
    asked for (``TRITON_INTERPRET=0``) on a machine without CUDA (they would fail at step 1)."""
    import torch

    from rmsnorm_kernel.backend import BACKEND, REASON

    if BACKEND == "cuda" and not torch.cuda.is_available():
        raise SpecError(
            f"{field}: the Triton kernels need a CUDA GPU or Triton's interpreter; {REASON} "
            "asks for compiled kernels and torch sees no CUDA GPU here: unset TRITON_INTERPRET "
            "(or set it to 1)"
        )


AVAILABLE["triton"] = kernels_runnable


def usable_norm(name: Any, field: str = "norm") -> Callable[..., nn.Module]:
    """:func:`resolve_norm`, and the norm can be built here (its ``available`` check passes)."""
    factory = resolve_norm(name, field)
    if (available := AVAILABLE.get(name)) is not None:
        available(field)
    return factory


def require_module(module: str, package: str, what: str, field: str) -> None:
    """:class:`SpecError` naming ``field``, ``what`` and ``package`` when ``module`` (an optional
    dependency) does not import here."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise SpecError(
            f"{field}: {what} needs the {package} package (pip install {package}); it is not "
            f"importable here ({e})"
        ) from e


def _check_data(value: Any, field: str) -> None:
    """Only plain data below ``field``: no ``_``-keys (``_target_``, ``_args_``...), no objects."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(f"{field}: must be finite (got {value!r})")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_data(item, f"{field}[{i}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or key.startswith("_"):
                raise SpecError(
                    f"{field}: key {key!r} refused (a spec holds plain arguments; keys starting "
                    "with '_', such as Hydra's _target_, are never accepted)"
                )
            _check_data(item, f"{field}.{key}")
        return
    raise SpecError(f"{field}: {type(value).__name__} is not plain data (got {value!r})")


def check_spec(spec: Any, field: str = "net") -> tuple[Callable[..., nn.Module], dict[str, Any]]:
    """Validate ``spec``; return ``(builder, args)`` without building anything.

    Raises :class:`SpecError` naming ``field`` (and the key) when ``spec`` is not an object, holds
    a ``_``-key or a non-data value, names an unregistered builder or norm, or passes arguments
    the builder does not take.
    """
    if not isinstance(spec, Mapping):
        raise SpecError(f"{field}: must be an object of plain arguments (got {spec!r})")
    _check_data(spec, field)
    builder = _lookup(BUILDERS, "builder", f"{field}.builder", spec.get("builder"))
    args = {k: v for k, v in spec.items() if k != "builder"}
    if "norm" in args:
        resolve_norm(args["norm"], f"{field}.norm")
    try:
        inspect.signature(builder).bind(**args)
    except TypeError as e:
        raise SpecError(f"{field}: arguments do not fit builder {spec['builder']!r}: {e}") from e
    return builder, args


def check_values(spec: Any, field: str = "net") -> None:
    """Everything :func:`build_from_spec` refuses, without building: :func:`check_spec`, then the
    builder's registered value rules (the function the builder itself runs first), which also
    check that the norm can be built here.

    Raises :class:`SpecError` naming ``field`` and the argument, e.g. ``model.net.eps: must be a
    number > 0 (got 0)``.
    """
    _, args = check_spec(spec, field)
    if (check := CHECKS.get(spec["builder"])) is not None:
        check(**args, field=field)


def build_from_spec(spec: Any, field: str = "net") -> nn.Module:
    """The net a spec describes, built by its registered builder (after :func:`check_spec`)."""
    builder, args = check_spec(spec, field)
    return builder(**args)


def build_net(builder: str, **args: Any) -> nn.Module:
    """Hydra entry point of ``model.net``: the config minus ``_target_`` is the spec itself."""
    return build_from_spec({"builder": builder, **args})


def spec_of(net_config: Mapping[str, Any]) -> dict[str, Any]:
    """The spec stored in a checkpoint: a resolved ``model.net`` config without Hydra's keys."""
    spec = {str(k): v for k, v in net_config.items() if not str(k).startswith("_")}
    check_spec(spec)
    return spec


def positive_int(name: str, value: Any, field: str = "net") -> int:
    """``value`` if it is an integer >= 1, else :class:`SpecError` naming ``<field>.<name>``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{field}.{name}: must be an integer >= 1 (got {value!r})", key=name)
    return value


def check_eps(eps: Any, field: str = "net") -> float:
    """``eps`` as a float if it is a finite number > 0, else :class:`SpecError` naming
    ``<field>.eps``."""
    ok = isinstance(eps, (int, float)) and not isinstance(eps, bool)
    if not ok or not eps > 0 or not math.isfinite(eps):
        raise SpecError(f"{field}.eps: must be a finite number > 0 (got {eps!r})", key="eps")
    return float(eps)

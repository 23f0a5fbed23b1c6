"""Campaign tolerances: defined once, in ``conf/campaign/default.yaml`` (``tolerances``), and read
here for every command that compares with the float64 oracle (campaigns, exercise, reference).

An element passes when ``|value - oracle| <= atol + rtol * |oracle|``, with the ``atol``/``rtol``
of the checked tensor's dtype. Every dtype the campaigns can check must have both numbers.
"""

from __future__ import annotations

from collections.abc import Mapping

from rmsnorm_kernel.cli.campaigns.cases import DTYPES
from rmsnorm_kernel.cli.validate import ConfigError, number

Tolerances = dict[str, dict[str, float]]


def read_tolerances(tolerances: Mapping, key: str = "campaign.tolerances") -> Tolerances:
    """``{dtype name: {"atol": float, "rtol": float}}`` for every dtype in :data:`DTYPES`.

    Raises :class:`ConfigError` naming the key for a missing dtype, an unknown dtype, a missing
    ``atol``/``rtol``, or a value that is not a finite number >= 0.
    """
    if not isinstance(tolerances, Mapping):
        raise ConfigError(f"{key} must map dtype names to {{atol, rtol}} (got {tolerances!r})")
    missing = [d for d in DTYPES if d not in tolerances]
    unknown = [d for d in tolerances if d not in DTYPES]
    if missing or unknown:
        raise ConfigError(
            f"{key} must give exactly the dtypes {list(DTYPES)} (missing {missing}, "
            f"unknown {unknown})"
        )
    out: Tolerances = {}
    for dtype in DTYPES:
        entry = tolerances[dtype]
        if not isinstance(entry, Mapping) or set(entry) != {"atol", "rtol"}:
            raise ConfigError(f"{key}.{dtype} must be {{atol, rtol}} (got {entry!r})")
        out[dtype] = {k: number(entry[k], f"{key}.{dtype}.{k}") for k in ("atol", "rtol")}
    return out


def read_ratio_limits(limits: Mapping | None, key: str = "campaign.ratio_limit") -> dict:
    """``{dtype name: limit > 0}``: the kernel's error may be at most ``limit`` x PyTorch's."""
    out = {}
    for dtype, limit in (limits or {}).items():
        if dtype not in DTYPES:
            raise ConfigError(f"{key}: unknown dtype {dtype!r} (known: {list(DTYPES)})")
        out[dtype] = number(limit, f"{key}.{dtype}", strict=True)
    return out

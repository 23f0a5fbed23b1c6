"""Pieces every command of the set shares: dtype names, the run's environment, JSON reports, and
the oracle tolerances (defined once, in ``conf/campaign/default.yaml``).

Tolerances: an element passes when ``|value - oracle| <= atol + rtol * |oracle|``, with the
``atol``/``rtol`` of the checked tensor's dtype; every dtype a command can check has both numbers.
Used by the check campaigns, ``exercise``, ``reference`` and ``bench``.
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Mapping
from pathlib import Path

import torch

from rmsnorm_kernel.cli.validate import ConfigError, number

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


def environment() -> dict:
    """Versions and hardware a figure depends on (the 'hardware named' of our figures)."""
    import triton

    from rmsnorm_kernel.backend import BACKEND

    info = {
        "backend": BACKEND,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "cuda_available": torch.cuda.is_available(),
        "device": "cpu (Triton interpreter)",
    }
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def _clean(value):
    """JSON has no inf/nan: write them as strings so the file stays standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(payload: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(payload), indent=2) + "\n")
    return path


def fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return format(value, spec)


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

"""The compare config, read and checked: the only way tolerances reach a check.

Tolerances are defined once, in ``conf/compare/*.yaml`` (``default.yaml`` for the MLP, ``lm.yaml``
for the language model, both with an ``equivalence:`` section for the DDP equivalence); nothing
in code holds a number to compare against. A tolerance that is missing, negative, NaN or not a
number would make a verdict meaningless, so it is refused with an error naming its key
(:class:`~..core.settings.SettingsError`, a ``ValueError``).

    compare_settings(cfg)      baseline, metric, curve, checks, and the tolerances of those checks
    equivalence_settings(cfg)  metric, and compare.equivalence: curves, curve_max_abs,
                               metric_abs, weight_max_abs
                               (weight_max_abs null: weights not compared)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.settings import SettingsError, check_compare_settings

#: The checks a sweep's ``compare.checks`` may list, in the order they run, and the tolerance
#: each compares against (None: reported as measured, no verdict).
CHECKS = {
    "metric_delta": "delta_metric_tolerance",
    "probe": "initial_error_tolerance",
    "curve": "curve_tolerance",
    "throughput": None,
}
#: Keys of ``compare.equivalence`` that are tolerances (max abs differences).
EQUIVALENCE_TOLERANCES = ("curve_max_abs", "metric_abs", "weight_max_abs")


def tolerance(settings: Mapping[str, Any], key: str, where: str = "compare") -> float:
    """``settings[key]`` as a float: a finite number >= 0, else an error naming ``where.key``."""
    value = settings.get(key) if key in settings else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SettingsError(f"{where}.{key} must be a finite number (got {value!r})")
    if value < 0:
        raise SettingsError(f"{where}.{key} must be >= 0 (got {value!r})")
    return float(value)


def _names(settings: Mapping[str, Any], key: str, where: str, allowed=None) -> list[str]:
    """``settings[key]``: a non-empty list of non-empty strings (of ``allowed``, when given)."""
    value = settings.get(key) if key in settings else None
    ok = isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0
    if not ok or not all(
        isinstance(v, str) and v and (allowed is None or v in allowed) for v in value
    ):
        rule = f"a non-empty list of {list(allowed)}" if allowed else "a non-empty list of names"
        raise SettingsError(f"{where}.{key} must be {rule} (got {value!r})")
    return list(value)


def compare_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep verdict's settings: ``baseline``, ``metric``, ``curve``, ``checks`` (a list of
    :data:`CHECKS` names) and every tolerance the listed checks use, checked."""
    out = check_compare_settings(settings)  # names, and the two tolerances every config holds
    checks = _names(settings, "checks", "compare", allowed=CHECKS)
    out["checks"] = [c for c in CHECKS if c in checks]  # run in a fixed order
    for check in out["checks"]:
        if CHECKS[check] is not None:
            out[CHECKS[check]] = tolerance(settings, CHECKS[check])
    return out


def equivalence_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"metric", "curves", "tolerances": {curve_max_abs, metric_abs, weight_max_abs}}`` from
    the compare config (``compare.metric`` and its ``equivalence`` section), checked."""
    metric = settings.get("metric") if "metric" in settings else None
    if not isinstance(metric, str) or not metric:
        raise SettingsError(f"compare.metric must be a non-empty string (got {metric!r})")
    section = settings.get("equivalence") if "equivalence" in settings else None
    if not isinstance(section, Mapping):
        raise SettingsError(f"compare.equivalence must be a mapping (got {section!r})")
    curves = _names(section, "curves", "compare.equivalence")
    # weight_max_abs: null says, visibly, that the runs export no weights (LLM width, no export)
    # and only curves and the metric are compared; every other tolerance must be a number.
    tolerances = {
        k: None
        if k == "weight_max_abs" and section.get(k, 0) is None
        else tolerance(section, k, "compare.equivalence")
        for k in EQUIVALENCE_TOLERANCES
    }
    return {"metric": metric, "curves": list(curves), "tolerances": tolerances}

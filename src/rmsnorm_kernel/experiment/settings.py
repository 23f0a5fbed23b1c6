"""Checks of the ``compare`` config group, run before any training or comparison starts.

Tolerances are defined once, in ``conf/compare/*.yaml``; code and tests read them from there. A
tolerance that is negative, NaN or not a number would make every verdict meaningless, so it is
refused with an error naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Keys of the ``compare`` group and what each must be.
TOLERANCES = ("delta_metric_tolerance", "initial_error_tolerance")
NAMES = ("baseline", "metric", "curve")


class SettingsError(ValueError):
    """A ``compare`` setting breaks its rule; the message names the key."""


def check_compare_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"baseline", "metric", "curve", "delta_metric_tolerance", "initial_error_tolerance"}``.

    Raises :class:`SettingsError` naming ``compare.<key>`` when a key is missing, a name is not a
    non-empty string, or a tolerance is not a finite number >= 0.
    """
    out: dict[str, Any] = {}
    for key in NAMES:
        value = settings.get(key) if key in settings else None
        if not isinstance(value, str) or not value:
            raise SettingsError(f"compare.{key} must be a non-empty string (got {value!r})")
        out[key] = value
    for key in TOLERANCES:
        value = settings.get(key) if key in settings else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingsError(f"compare.{key} must be a number (got {value!r})")
        if not math.isfinite(value) or value < 0:
            raise SettingsError(f"compare.{key} must be a finite number >= 0 (got {value!r})")
        out[key] = float(value)
    return out

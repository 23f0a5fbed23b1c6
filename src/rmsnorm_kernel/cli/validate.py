"""Config checks shared by the commands: a bad value stops the command before it writes anything.

Every error names the config key and the rule, e.g.
``campaign.tolerances.float32.atol must be a finite number >= 0 (got -1)``.
"""

from __future__ import annotations

import math


class ConfigError(ValueError):
    """A config value breaks its rule; the command exits 2 without output."""


def number(value, key: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    """``value`` as a finite float ``>= minimum`` (``> minimum`` when ``strict``)."""
    rule = f"a finite number {'>' if strict else '>='} {minimum:g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key} must be {rule} (got {value!r})")
    value = float(value)
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        raise ConfigError(f"{key} must be {rule} (got {value!r})")
    return value


def count(value, key: str, *, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum} (got {value!r})")
    return int(value)


def choice(value, key: str, allowed) -> str:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {list(allowed)} (got {value!r})")
    return value

"""Config checks shared by the commands: a bad value stops the command before it writes anything.

Every error names the config key (or the argument) and the rule, e.g.
``campaign.tolerances.float32.atol must be a finite number >= 0 (got -1)``, and reaches the user
as one line ``error: <message>`` on stderr with exit code 2 (:func:`report_error`).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from rmsnorm_kernel.experiment.core.settings import override_culprit


class ConfigError(ValueError):
    """A config value breaks its rule; the command exits 2 without output."""


def report_error(error: BaseException) -> int:
    """Print ``error: <message>`` as one line on stderr (plain text: a message holding ``[...]``
    is printed as it is, never read as markup, and never wrapped); returns the exit code, 2."""
    print(f"error: {' '.join(str(error).split())}", file=sys.stderr, flush=True)
    return 2


def directory(value, key: str) -> Path:
    """``value`` as the path of a directory a command writes into: a non-empty path (an empty
    ``paths.data_dir=`` would write into the current directory), whose writability
    :func:`writable_dir` checks."""
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise ConfigError(f"{key} must be a non-empty directory path (got {value!r})")
    return Path(value)


def writable_dir(value, key: str) -> Path:
    """``value`` (:func:`directory`) as a directory that can hold new files, or creatable as one:
    no part of it is a file, not read-only (training's rule, ``settings.check_writable_dir``).
    Checked before the command writes anything; creates nothing."""
    from rmsnorm_kernel.experiment.core.settings import SettingsError, check_writable_dir

    path = directory(value, key)
    try:
        check_writable_dir(path, key)
    except SettingsError as e:
        raise ConfigError(str(e)) from e
    return path


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


def eps(value, key: str) -> float:
    """``value`` as the kernels' eps (the rule ``rmsnorm`` applies, :mod:`rmsnorm_kernel.contract`):
    a finite number > 0 that fits in float32, at least float32's smallest normal value (the
    kernels add it in float32, where a smaller one is 0 or subnormal)."""
    from rmsnorm_kernel.contract import (
        FLOAT32_MAX,
        FLOAT32_TINY,
        ContractTypeError,
        ContractValueError,
        check_real,
    )

    try:
        return check_real(key, value, positive=True)  # the rule itself: the contract's
    except (ContractTypeError, ContractValueError) as e:
        raise ConfigError(
            f"{key} must be a finite number > 0 that fits in float32, in "
            f"[{FLOAT32_TINY:.5g}, {FLOAT32_MAX:.4g}] (got {value!r})"
        ) from e


def names(value, key: str, what: str) -> list[str]:
    """``value`` as a non-empty list of names (an empty one makes the command vacuous: a pass,
    or a fail, with nothing tested)."""
    from omegaconf import OmegaConf

    items = list(value) if OmegaConf.is_list(value) or isinstance(value, list | tuple) else None
    if items is None or any(not isinstance(item, str) for item in items):
        shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        raise ConfigError(f"{key} must be a list of {what} names (got {shown!r})")
    if not items:
        raise ConfigError(f"{key} must name at least one {what} (got [])")
    return items


def choice(value, key: str, allowed) -> str:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {list(allowed)} (got {value!r})")
    return value


#: The largest seed a torch generator seeded from ``campaign.seed`` takes here.
MAX_SEED = 2**32 - 1


def seed(value, key: str) -> int:
    """``value`` as a seed: an integer in ``[0, MAX_SEED]`` (``1.5``, ``"abc"``, ``-3`` refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(f"{key} must be an integer in [0, {MAX_SEED}] (got {value!r})")
    return int(value)


def check_command_config(cfg) -> None:
    """Rules of the command set's own keys that no command checks later: ``campaign.seed``.

    To call before ``_run`` (inside its ``ConfigError`` handler, so a bad value exits 2)."""
    campaign = cfg.get("campaign") if hasattr(cfg, "get") else None
    if campaign is not None and "seed" in campaign:
        seed(campaign["seed"], "campaign.seed")


def compose_error(overrides, error: Exception) -> ConfigError:
    """A Hydra composition error (unknown key, malformed override such as a bare ``garbage``) as
    one line naming the override: ``compose`` raises it, the command exits 2."""
    text = " ".join(str(error).split())
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    culprit = override_culprit(overrides, text)
    if "Could not override" in text or "not in struct" in text:
        key = (culprit or "?").split("=", 1)[0]
        return ConfigError(
            f"override {culprit!r}: no key {key!r} in the config (a new key needs +{culprit})"
        )
    if "Error parsing override" in text:
        reason = lines[1] if len(lines) > 1 else text
        return ConfigError(
            f"override {culprit!r} must be key=value, +key=value or ~key (Hydra: {reason})"
        )
    return ConfigError(f"overrides {list(overrides)}: {text}")

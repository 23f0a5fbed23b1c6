"""The one place a training config is checked, before anything is built or written.

:func:`check_train_config` is called by ``train(cfg)`` first, and by ``python -m
rmsnorm_kernel.train`` for every value of a sweep before any job starts. A value that breaks its
rule raises :class:`SettingsError` with one line naming the key, the rule and the value, e.g.
``seed must be an integer in [0, 4294967295] (got 1.5)``; the command exits 2 with that line.

Tolerances are defined once, in ``conf/compare/*.yaml``; code and tests read them from there. A
tolerance that is negative, NaN or not a number would make every verdict meaningless, so it is
refused with an error naming the key (:func:`check_compare_settings`).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The largest seed ``lightning.seed_everything`` (numpy) accepts.
MAX_SEED = 2**32 - 1

#: Keys of the ``compare`` group and what each must be.
TOLERANCES = ("delta_metric_tolerance", "initial_error_tolerance")
NAMES = ("baseline", "metric", "curve")


class SettingsError(ValueError):
    """A setting breaks its rule; the message (one line) names the key, the rule and the value."""


def _get(cfg: Any, key: str) -> tuple[bool, Any]:
    """``(present, value)`` of a dotted ``key`` in a DictConfig or mapping (never resolves a
    missing key into an error)."""
    node = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) and not hasattr(node, "keys"):
            return False, None
        if part not in node:
            return False, None
        node = node[part]
    return True, node


def _integer(cfg: Any, key: str, low: int, high: int | None = None, optional: bool = True) -> None:
    present, value = _get(cfg, key)
    if not present and optional:
        return
    rule = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        raise SettingsError(f"{key} must be {rule} (got {value!r})")


def _positive_number(cfg: Any, key: str) -> None:
    present, value = _get(cfg, key)
    if not present:
        return
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{key} must be a finite number > 0 (got {value!r})")


def _path(cfg: Any, key: str) -> Path:
    present, value = _get(cfg, key)
    if not present or not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise SettingsError(f"{key} must be a non-empty directory path (got {value!r})")
    return Path(value)


def check_writable_dir(path: Path, key: str) -> None:
    """``path`` can hold new files: a directory (or creatable as one: no part of it is a file)
    that accepts a small file. The probe file is removed at once; nothing else is created.

    Raises :class:`SettingsError` naming ``key`` and the path: a file in the way, a read-only
    directory or file system, a full disk.
    """
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is a file" if probe == path else f"lies under a file ({probe})"
        raise SettingsError(f"{key} must be a writable directory; {path} {where}")
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".write_probe") as f:
            f.write(b"x")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise SettingsError(
            f"{key} must be a writable directory; {path} is not ({e.strerror or e})"
        ) from e


def check_compile_switches(compile: object, inductor_fusion: object) -> None:
    """``model.compile`` / ``model.inductor_fusion``: booleans, and the pass needs the compile
    (checked here for a config, and by the LightningModule built without one)."""
    for key, value in (("compile", compile), ("inductor_fusion", inductor_fusion)):
        if not isinstance(value, bool):
            raise SettingsError(f"model.{key} must be true or false (got {value!r})")
    if inductor_fusion and not compile:
        raise SettingsError(
            "model.inductor_fusion=true needs model.compile=true: the pass rewrites compiled "
            "graphs only"
        )


def _compile_switches(cfg: Any) -> None:
    values = {}
    for key in ("compile", "inductor_fusion"):
        present, value = _get(cfg, f"model.{key}")
        values[key] = value if present else False
    check_compile_switches(**values)


def check_train_config(cfg: Any, paths: bool = True) -> None:
    """Every rule of a composed training config (``conf/train.yaml`` and its groups).

    The checkpoint dir must be writable; with ``paths=True`` (``train(cfg)``) the run's output
    dir too (``paths=False``: the sweep pre-check, before the run dirs are named).

    Raises :class:`SettingsError` with one line naming the key, the rule and the value.
    """
    _integer(cfg, "seed", 0, MAX_SEED, optional=False)
    present, max_steps = _get(cfg, "trainer.max_steps")
    if present and max_steps != -1:
        _integer(cfg, "trainer.max_steps", 1)
    if present and max_steps == -1:  # then the epoch budget ends training
        _integer(cfg, "trainer.max_epochs", 1, optional=False)
    for key in ("n_train", "n_val", "n_test", "batch_size", "eval_batch_size"):
        _integer(cfg, f"dataset.{key}", 1)
    present, n_train = _get(cfg, "dataset.n_train")
    _, batch = _get(cfg, "dataset.batch_size")
    if present and batch is not None and batch > n_train:
        raise SettingsError(
            f"dataset.batch_size must be <= dataset.n_train ({n_train}): a step takes a full "
            f"batch (got {batch})"
        )
    _positive_number(cfg, "model.optimizer.lr")
    _compile_switches(cfg)
    present, ckpt = _get(cfg, "ckpt_path")
    if present and ckpt is not None:
        if not isinstance(ckpt, str) or not (ckpt == "auto" or Path(ckpt).is_file()):
            raise SettingsError(
                "ckpt_path must be null, auto, or an existing last.ckpt / .safetensors file "
                f"(got {ckpt!r})"
            )
        resumes = ckpt == "auto" or not ckpt.endswith(".safetensors")
        if resumes and _get(cfg, "trainer.enable_checkpointing")[1] is False:
            raise SettingsError(
                "ckpt_path resumes from a Lightning last.ckpt, which needs "
                "trainer.enable_checkpointing=true (this config writes none; got "
                f"ckpt_path={ckpt!r})"
            )
    if _get(cfg, "compare")[1] is not None:
        check_compare_settings(cfg["compare"])
    if paths:
        check_writable_dir(_path(cfg, "paths.output_dir"), "paths.output_dir")
    check_writable_dir(_path(cfg, "paths.checkpoint_dir"), "paths.checkpoint_dir")


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

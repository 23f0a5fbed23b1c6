"""``checkpoints/index.json``: which run wrote which exported file, and its sha256.

::

    {"files": {"train_triton_seed0_3f2a9c1b7d40.safetensors":
                 {"run_dir": ..., "config_hash": ..., "sha256": ..., "norm": ..., "seed": ...}}}

Parallel jobs of a sweep export at the same time, so every read-modify-write of the index, and
the choice of a free file name, happens under one lock file (``index.json.lock``), and the new
index replaces the old one atomically (written beside it as ``index.json.<pid>.tmp``, then
renamed): a reader never sees a half-written index, and no entry is lost. When that write fails
(disk full, say) the temporary file is removed and the old index stays as it was.

A reader trusts an entry only through :func:`checked_entries`: its key must be the bare name of a
file inside the index's own folder (no absolute path, no ``..``, no subfolder, no link out), and
its value an object with a 64-hex-digit ``sha256`` and a string ``run_dir``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

INDEX_FILE = "index.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")


class IndexFileError(RuntimeError):
    """The index file exists but cannot be read as an index."""


def index_path(directory: Path) -> Path:
    return Path(directory) / INDEX_FILE


@contextlib.contextmanager
def locked(directory: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """Hold the index lock of ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(index_path(directory)) + ".lock", timeout=timeout_s):
        yield


def read_index(directory: Path) -> dict[str, dict[str, Any]]:
    """``{file name: entry}``; empty when there is no index yet."""
    path = index_path(directory)
    if not path.is_file():
        return {}
    try:
        files = json.loads(path.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise IndexFileError(f"{path}: not a checkpoint index ({type(e).__name__}: {e})") from e
    if not isinstance(files, dict):
        raise IndexFileError(f"{path}: 'files' must be an object")
    return files


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def entry_file(directory: Path, name: Any) -> Path:
    """``directory/name`` when ``name`` is the bare name of a file inside ``directory``.

    Raises :class:`IndexFileError` for an absolute path, ``..``, a subfolder, or a name that
    resolves (through a link) outside ``directory``.
    """
    directory = Path(directory)
    where = index_path(directory)
    rule = "must be the bare name of a file inside the index's folder"
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or Path(name).is_absolute()
    ):
        raise IndexFileError(f"{where}: entry name {rule} {directory} (got {_short(name)})")
    path = directory / name
    real, folder = path.resolve(), directory.resolve()
    if real.parent != folder:
        raise IndexFileError(
            f"{where}: entry name {rule} {directory} (got {_short(name)}, which resolves to {real})"
        )
    return path


def checked_entries(directory: Path) -> dict[str, dict[str, Any]]:
    """:func:`read_index`, with every entry checked before any file it names is opened.

    Each key must pass :func:`entry_file`; each value must be an object with ``sha256`` (64
    lowercase hex digits) and ``run_dir`` (a string). Raises :class:`IndexFileError` naming the
    entry, the rule and the value.
    """
    files = read_index(directory)
    where = index_path(directory)
    for name, entry in files.items():
        entry_file(directory, name)
        if not isinstance(entry, dict):
            raise IndexFileError(
                f"{where}: entry {name!r} must be an object with 'sha256' and 'run_dir' "
                f"(got {_short(entry)})"
            )
        missing = [key for key in ("sha256", "run_dir") if key not in entry]
        if missing:
            raise IndexFileError(
                f"{where}: entry {name!r} lacks {missing} (each entry needs 'sha256' and "
                f"'run_dir'; got keys {sorted(entry)})"
            )
        if not isinstance(entry["sha256"], str) or not _SHA256.fullmatch(entry["sha256"]):
            raise IndexFileError(
                f"{where}: entry {name!r} field 'sha256' must be 64 lowercase hex digits "
                f"(got {_short(entry['sha256'])})"
            )
        if not isinstance(entry["run_dir"], str):
            raise IndexFileError(
                f"{where}: entry {name!r} field 'run_dir' must be a string "
                f"(got {_short(entry['run_dir'])})"
            )
    return files


def add_entry(directory: Path, file_name: str, entry: dict[str, Any]) -> None:
    """Record ``file_name``; call it with the lock held (see :func:`locked`).

    On any failure the temporary file is removed and ``index.json`` is left unchanged.
    """
    files = read_index(directory)
    if file_name in files:
        raise IndexFileError(f"{index_path(directory)} already lists {file_name}: not replacing it")
    files[file_name] = entry
    text = json.dumps({"files": dict(sorted(files.items()))}, indent=2) + "\n"
    path = index_path(directory)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise

"""``checkpoints/index.json``: which run wrote which exported file, and its sha256.

::

    {"files": {"train_triton_seed0_3f2a9c1b7d40.safetensors":
                 {"run_dir": ..., "config_hash": ..., "sha256": ..., "norm": ..., "seed": ...}}}

Parallel jobs of a sweep export at the same time, so every read-modify-write of the index, and
the choice of a free file name, happens under one lock file (``index.json.lock``), and the new
index replaces the old one atomically (written beside it, then renamed): a reader never sees a
half-written index, and no entry is lost.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

INDEX_FILE = "index.json"


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


def add_entry(directory: Path, file_name: str, entry: dict[str, Any]) -> None:
    """Record ``file_name``; call it with the lock held (see :func:`locked`)."""
    files = read_index(directory)
    if file_name in files:
        raise IndexFileError(f"{index_path(directory)} already lists {file_name}: not replacing it")
    files[file_name] = entry
    path = index_path(directory)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"files": dict(sorted(files.items()))}, indent=2) + "\n")
    os.replace(tmp, path)

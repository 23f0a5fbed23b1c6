"""checkpoints/index.json under concurrent writers: every entry kept, never a torn file."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from rmsnorm_kernel.experiment import index
from rmsnorm_kernel.experiment.checkpoint import unique_path


def _writer(directory: str, worker: int, count: int) -> None:
    for i in range(count):
        with index.locked(Path(directory)):
            path = unique_path(Path(directory), "same_stem")  # every writer wants one name
            path.write_bytes(b"x")
            index.add_entry(Path(directory), path.name, {"worker": worker, "i": i})


def test_parallel_writers_lose_no_entry_and_never_share_a_name(tmp_path):
    count, workers = 15, 3
    procs = [
        mp.get_context("spawn").Process(target=_writer, args=(str(tmp_path), w, count))
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    files = index.read_index(tmp_path)
    assert len(files) == count * workers == len(list(tmp_path.glob("same_stem*.safetensors")))
    assert sorted((e["worker"], e["i"]) for e in files.values()) == [
        (w, i) for w in range(workers) for i in range(count)
    ]
    json.loads((tmp_path / "index.json").read_text())  # whole, parseable


def test_an_entry_is_never_replaced(tmp_path):
    with index.locked(tmp_path):
        index.add_entry(tmp_path, "a.safetensors", {"sha256": "1"})
        with pytest.raises(index.IndexFileError, match="already lists a.safetensors"):
            index.add_entry(tmp_path, "a.safetensors", {"sha256": "2"})
    assert index.read_index(tmp_path)["a.safetensors"]["sha256"] == "1"

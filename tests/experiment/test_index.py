"""checkpoints/index.json under concurrent writers: every entry kept, never a torn file; a failed
write leaves the old index and no temporary file."""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_kernel.experiment.exports import index
from rmsnorm_kernel.experiment.exports.checkpoint import unique_path


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


def test_a_listed_name_stays_taken_after_its_file_is_deleted(tmp_path):
    """Deleting exported files (``rm checkpoints/*.safetensors``) but not index.json: the next
    export takes a new name instead of failing on the entry it may not replace."""
    with index.locked(tmp_path):
        first = unique_path(tmp_path, "run")
        first.write_bytes(b"x")
        index.add_entry(tmp_path, first.name, {"sha256": "1"})
    first.unlink()
    with index.locked(tmp_path):
        listed = index.read_index(tmp_path)
        assert unique_path(tmp_path, "run") == first  # the disk alone would reuse it
        again = unique_path(tmp_path, "run", listed)
        again.write_bytes(b"y")
        index.add_entry(tmp_path, again.name, {"sha256": "2"})
    assert again.name == "run.v2.safetensors"
    files = index.read_index(tmp_path)
    assert files["run.safetensors"]["sha256"] == "1" and files[again.name]["sha256"] == "2"


def test_a_failed_rename_leaves_no_tmp_and_the_old_index(tmp_path, monkeypatch):
    with index.locked(tmp_path):
        index.add_entry(tmp_path, "a.safetensors", {"sha256": "1"})
    before = (tmp_path / "index.json").read_bytes()

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(index.os, "replace", no_space)
    with index.locked(tmp_path), pytest.raises(OSError, match="No space left"):
        index.add_entry(tmp_path, "b.safetensors", {"sha256": "2"})
    assert list(tmp_path.glob("index.json.*.tmp")) == []
    assert (tmp_path / "index.json").read_bytes() == before


_FULL_DISK = """
import importlib.util, json, resource, signal, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("index_under_test", sys.argv[1])
index = importlib.util.module_from_spec(spec)
spec.loader.exec_module(index)
folder = Path(sys.argv[2])
index.add_entry(folder, "a.safetensors", {"sha256": "1"})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    index.add_entry(folder, "b.safetensors", {"run_dir": "x" * 10_000})
    print("no error")
except OSError as e:
    print(f"OSError errno {e.errno}")
"""


def test_a_write_that_fails_midway_leaves_no_tmp_and_the_old_index(tmp_path):
    """A real failing write (the file-size limit stands in for a full disk), in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, index.__file__, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"OSError errno {errno.EFBIG}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json"]
    assert list(index.read_index(tmp_path)) == ["a.safetensors"]

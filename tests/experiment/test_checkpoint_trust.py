"""What a checkpoint folder may make the reload check do: index entries only name files inside
the root (issue 15 item 6); crafted sizes and nesting are refused before anything is built (item
7); the same export gives the same bytes, and the no-CUDA advice is a command that runs (item 13).

The checkpoints here are tiny nets exported directly (no training), so every test takes well
under a second apart from one subprocess.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rmsnorm_kernel.cli.main import main as cli_main
from rmsnorm_kernel.experiment.core.builders import build_from_spec
from rmsnorm_kernel.experiment.exports.checkpoint import (
    MAX_NET_DEPTH,
    make_metadata,
    sha256_of,
    verify_checkpoint,
    write_checkpoint,
)
from rmsnorm_kernel.experiment.exports.reload import CheckpointError, check_checkpoints, main

SPEC = {
    "builder": "mlp",
    "in_features": 4,
    "hidden_features": 8,
    "out_features": 2,
    "norm": "reference",
    "eps": 1e-6,
}


def _export(path: Path, order: list[str] | None = None) -> Path:
    """A tiny reference-norm MLP exported to ``path`` (seed 0: always the same weights)."""
    torch.manual_seed(0)
    net = build_from_spec(SPEC)
    inputs = torch.randn(5, 4)
    meta = make_metadata(SPEC, "reference", 0, "0123456789ab", "cpu")
    if order is not None:
        meta = {key: meta[key] for key in order}
    write_checkpoint(path, net, inputs, meta)
    return path


def _rewrite(path: Path, **fields: str) -> Path:
    with safe_open(str(path), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = dict(f.metadata())
    save_file(tensors, str(path), metadata={**meta, **fields})
    return path


def _write_index(root: Path, files: dict) -> None:
    (root / "index.json").write_text(json.dumps({"files": files}))


@pytest.fixture
def root(tmp_path) -> Path:
    """A checkpoint root holding one good, indexed file ``good.safetensors``."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    path = _export(folder / "good.safetensors")
    _write_index(folder, {path.name: {"run_dir": "runs/0", "sha256": sha256_of(path)}})
    return folder


# --- item 6: the index names files inside the root, and well-formed entries only ---------------


def _outside_names(root: Path, outside: Path) -> dict[str, str]:
    (root / "sub").mkdir()
    (root / "link.safetensors").symlink_to(outside)
    return {
        "absolute": str(outside),
        "dotdot": f"../{outside.parent.name}/{outside.name}",
        "subfolder": "sub/../../outside/evil.safetensors",
        "link_out": "link.safetensors",
    }


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "subfolder", "link_out"])
def test_an_index_entry_naming_a_file_outside_the_root_is_refused(root, kind, capsys):
    outside = _export(root.parent / "outside" / "evil.safetensors")
    name = _outside_names(root, outside)[kind]
    _write_index(root, {name: {"run_dir": "x", "sha256": "0" * 64}})  # and a wrong sha256
    with pytest.raises(CheckpointError, match="must be the bare name of a file inside"):
        check_checkpoints(root=root)
    assert main(["--root", str(root)]) == 1
    captured = capsys.readouterr()
    assert "reload check FAILED" in captured.err and repr(name) in captured.err
    assert "ok " not in captured.out


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (5, r"entry 'good.safetensors' must be an object with 'sha256' and 'run_dir' \(got 5\)"),
        (["a"], r"must be an object with 'sha256' and 'run_dir' \(got \['a'\]\)"),
        ({"run_dir": "r"}, r"entry 'good.safetensors' lacks \['sha256'\]"),
        ({"sha256": "SHA"}, r"entry 'good.safetensors' lacks \['run_dir'\]"),
        ({"run_dir": "r", "sha256": 7}, r"field 'sha256' must be 64 lowercase hex digits"),
        ({"run_dir": 3, "sha256": "SHA"}, r"field 'run_dir' must be a string \(got 3\)"),
    ],
)
def test_a_malformed_index_entry_gives_a_message_not_a_traceback(root, entry, message, capsys):
    if isinstance(entry, dict) and entry.get("sha256") == "SHA":
        entry = {**entry, "sha256": sha256_of(root / "good.safetensors")}
    _write_index(root, {"good.safetensors": entry})
    with pytest.raises(CheckpointError, match=message):
        check_checkpoints(root=root)
    assert main(["--root", str(root)]) == 1
    assert "reload check FAILED" in capsys.readouterr().err


def test_the_good_indexed_file_still_passes(root):
    [result] = check_checkpoints(root=root)
    assert result["indexed"] and result["run_dir"] == "runs/0" and result["reload_max_diff"] == 0


# --- item 7: sizes from the metadata are checked against the file's header first ---------------

_MEASURE = """
import json, resource, sys, time
from rmsnorm_kernel.experiment.exports.checkpoint import CheckpointError, verify_checkpoint
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    verify_checkpoint(sys.argv[1])
    error = None
except CheckpointError as e:
    error = str(e)
seconds = time.perf_counter() - start
grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"error": error, "seconds": seconds, "grown_mib": grown_kib / 1024}))
"""


def test_a_crafted_size_is_refused_in_milliseconds_using_little_memory(tmp_path):
    """The issue's file: a small checkpoint whose metadata claims hidden_features=40000000 (a
    1.1 GB net here; 6.9 GB of RSS in the issue's run) must not allocate it."""
    path = _export(tmp_path / "crafted.safetensors")
    _rewrite(path, net=json.dumps({**SPEC, "hidden_features": 40_000_000}))
    assert path.stat().st_size < 4096
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    assert measured["error"] is not None
    assert (
        "'fc1.weight' is F32 [8, 4] in the file, field 'net' needs F32 [40000000, 4]"
        in (measured["error"])
    )
    assert "refused before building it" in measured["error"]
    assert measured["seconds"] < 1.0, measured
    assert measured["grown_mib"] < 64, measured


@pytest.mark.parametrize("hidden", [200_000_000, 8])
def test_a_wrong_or_huge_size_is_refused_before_building(tmp_path, hidden):
    path = _export(tmp_path / "crafted.safetensors")
    _rewrite(path, net=json.dumps({**SPEC, "hidden_features": hidden, "out_features": 3}))
    with pytest.raises(CheckpointError, match=r"do not match the net .* refused before building"):
        verify_checkpoint(path)


def test_deeply_nested_net_metadata_is_refused_with_a_message(tmp_path):
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000  # past the JSON parser's recursion limit
    path = _rewrite(_export(tmp_path / "deep.safetensors"), net=deep)
    with pytest.raises(CheckpointError, match=rf"field 'net' must nest at most {MAX_NET_DEPTH}"):
        verify_checkpoint(path)
    with pytest.raises(CheckpointError) as caught:
        verify_checkpoint(path)
    assert len(str(caught.value)) < 600  # the field is quoted cut short, not 600 KB of braces
    nested: object = 1.0
    for _ in range(MAX_NET_DEPTH + 4):
        nested = [nested]
    path = _rewrite(path, net=json.dumps({**SPEC, "eps": nested}))
    with pytest.raises(CheckpointError, match=rf"nest at most {MAX_NET_DEPTH} levels \(nests "):
        verify_checkpoint(path)


# --- item 13: the same export gives the same bytes; the no-CUDA advice runs ---------------------


def test_the_same_weights_and_metadata_give_the_same_bytes(tmp_path):
    """safetensors keeps metadata in a hash map whose order changes from call to call."""
    keys = list(make_metadata(SPEC, "reference", 0, "0123456789ab", "cpu"))
    orders = [keys, keys[::-1]] + [random.Random(i).sample(keys, len(keys)) for i in range(4)]
    paths = [_export(tmp_path / f"export{i}.safetensors", order) for i, order in enumerate(orders)]
    data = {p.read_bytes() for p in paths}
    assert len(data) == 1
    assert len({sha256_of(p) for p in paths}) == 1
    raw = paths[0].read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    assert list(header["__metadata__"]) == sorted(keys)  # as stored (a reader's dict is unordered)
    assert verify_checkpoint(paths[0])["reload_max_diff"] == 0.0


def test_the_no_cuda_advice_is_a_command_that_runs(tmp_path, monkeypatch, capsys):
    # A file whose predictions are labelled as made on cuda (they were made on this CPU, so the
    # suggested comparison on the CPU passes bit for bit).
    path = _rewrite(_export(tmp_path / "cuda made.safetensors"), device="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli_main(["check-checkpoints", "--ckpt", str(path)]) == 1
    err = capsys.readouterr().err
    assert "no CUDA here" in err
    suggested = shlex.split(re.search(r"`([^`]+)`", err).group(1))
    assert suggested[:3] == ["python", "-m", "rmsnorm_kernel.cli"]
    assert suggested[3:] == ["check-checkpoints", "--ckpt", str(path), "--device", "cpu"]
    assert cli_main(suggested[3:]) == 0
    out = capsys.readouterr().out
    assert "device=cpu" in out and "1 checkpoint(s) reload bit for bit" in out


def test_an_unusable_device_is_refused_with_a_message(tmp_path, capsys):
    path = _export(tmp_path / "good.safetensors")
    assert main(["--ckpt", str(path), "--device", "banana"]) == 1
    assert "device must be a torch device such as cpu (got 'banana')" in capsys.readouterr().err


def test_a_dir_or_a_lightning_checkpoint_is_named_for_what_it_is(tmp_path, capsys):
    """--ckpt checkpoints/ said "checkpoint not found"; --ckpt last.ckpt said "truncated or
    corrupt safetensors"."""
    last = tmp_path / "last.ckpt"
    torch.save({"state_dict": {}, "global_step": 3}, last)
    cases = {
        tmp_path: f"{tmp_path} is a directory, not a checkpoint file: pass one .safetensors file, "
        "or the folder holding index.json as --root",
        last: f"{last}: a torch.save file (a Lightning last.ckpt?), not an exported safetensors "
        "checkpoint",
    }
    for path, message in cases.items():
        assert main(["--ckpt", str(path)]) == 1
        assert message in capsys.readouterr().err

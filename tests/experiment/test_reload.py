"""`make reload-check`: zero diff on good checkpoints, a clear error naming bad ones; the index."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rmsnorm_kernel.experiment.exports.reload import CheckpointError, check_checkpoints, main


@pytest.fixture
def ckpt_dir(trained_pair, tmp_path) -> Path:
    """A copy of the two trained checkpoints (reference.safetensors, triton.safetensors)."""
    for norm, m in trained_pair.items():
        shutil.copy(m["checkpoint"], tmp_path / f"{norm}.safetensors")
    return tmp_path


@pytest.fixture
def indexed_dir(trained_pair, tmp_path) -> Path:
    """Both runs' checkpoint folder, copied with its index.json."""
    src = Path(trained_pair["reference"]["checkpoint"]).parent
    return Path(shutil.copytree(src, tmp_path / "ckpt", ignore=shutil.ignore_patterns("*.lock")))


def _rewrite(path: Path, edit) -> None:
    with safe_open(str(path), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = dict(f.metadata())
    edit(tensors, meta)
    save_file(tensors, str(path), metadata=meta)


def test_every_checkpoint_reloads_bit_for_bit(ckpt_dir):
    results = check_checkpoints(root=ckpt_dir)
    assert sorted(r["norm"] for r in results) == ["reference", "triton"]
    assert all(r["reload_max_diff"] == 0.0 and r["tensors"] == 5 for r in results)
    assert not any(r["indexed"] for r in results)  # no index.json here: still verified
    assert issubclass(CheckpointError, RuntimeError)


def test_every_indexed_file_is_verified_with_its_sha256(indexed_dir, trained_pair):
    results = check_checkpoints(root=indexed_dir)
    assert [r["indexed"] for r in results] == [True, True]
    assert {r["run_dir"] for r in results} == {m["output_dir"] for m in trained_pair.values()}
    assert {r["sha256"] for r in results} == {m["checkpoint_sha256"] for m in trained_pair.values()}


def test_a_file_changed_after_export_fails_its_sha256(indexed_dir):
    path = sorted(indexed_dir.glob("*triton*.safetensors"))[0]
    _rewrite(path, lambda t, m: m.update(seed="00"))  # still loads, different bytes
    with pytest.raises(CheckpointError, match=rf"{path.name}: sha256 .* differs from the recorded"):
        check_checkpoints(root=indexed_dir)


def test_a_listed_file_that_is_gone_fails(indexed_dir):
    path = sorted(indexed_dir.glob("*reference*.safetensors"))[0]
    path.unlink()
    with pytest.raises(CheckpointError, match=rf"checkpoint not found: .*{path.name}") as e:
        check_checkpoints(root=indexed_dir)
    assert "index.json lists" in str(e.value) and "empty" in str(e.value)


def test_truncated_checkpoint_fails_naming_the_file(ckpt_dir):
    path = ckpt_dir / "triton.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="triton.safetensors.*truncated"):
        check_checkpoints([path])


def test_reload_command_exits_non_zero_on_a_truncated_checkpoint(ckpt_dir):
    path = ckpt_dir / "cut.safetensors"
    path.write_bytes((ckpt_dir / "reference.safetensors").read_bytes()[:500])
    cmd = [sys.executable, "-m", "rmsnorm_kernel.experiment.exports.reload", "--ckpt", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "cut.safetensors" in proc.stderr and "truncated" in proc.stderr


def test_missing_and_empty(tmp_path, capsys):
    with pytest.raises(CheckpointError, match="checkpoint not found: .*nope.safetensors"):
        check_checkpoints([tmp_path / "nope.safetensors"])
    with pytest.raises(CheckpointError, match="no checkpoints"):
        check_checkpoints(root=tmp_path)
    assert main(["--root", str(tmp_path)]) == 1
    assert "reload check FAILED" in capsys.readouterr().err


def test_altered_weights_are_a_mismatch(ckpt_dir):
    path = ckpt_dir / "reference.safetensors"
    _rewrite(path, lambda t, m: t["fc2.bias"].add_(1e-3))
    with pytest.raises(CheckpointError, match="reference.safetensors.*predictions differ"):
        check_checkpoints([path])


def test_weights_of_another_net_are_a_mismatch(ckpt_dir):
    path = ckpt_dir / "reference.safetensors"

    def wider(tensors, meta):
        net = json.loads(meta["net"])
        net["hidden_features"] += 1
        meta["net"] = json.dumps(net)

    _rewrite(path, wider)
    with pytest.raises(CheckpointError, match="reference.safetensors.*do not match"):
        check_checkpoints([path])


def test_foreign_safetensors_file_is_refused(tmp_path):
    path = tmp_path / "foreign.safetensors"
    save_file({"w": torch.ones(2)}, str(path))
    with pytest.raises(CheckpointError, match="foreign.safetensors: not an experiment checkpoint"):
        check_checkpoints([path])


def test_reload_cli_passes_on_good_checkpoints(ckpt_dir, capsys):
    assert main(["--root", str(ckpt_dir)]) == 0
    assert "2 checkpoint(s) reload bit for bit" in capsys.readouterr().out

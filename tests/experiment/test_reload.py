"""`make reload-check`: zero diff on good checkpoints, a clear error naming bad ones."""

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

from rmsnorm_kernel.experiment.reload import CheckpointError, check_checkpoints, main


@pytest.fixture
def ckpt_dir(trained_pair, tmp_path) -> Path:
    """A copy of the two trained checkpoints, free to damage."""
    for m in trained_pair.values():
        shutil.copy(m["checkpoint"], tmp_path)
    return tmp_path


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
    assert issubclass(CheckpointError, RuntimeError)


def test_truncated_checkpoint_fails_naming_the_file(ckpt_dir):
    path = ckpt_dir / "train_triton_seed0.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="train_triton_seed0.safetensors.*truncated"):
        check_checkpoints([path])


def test_reload_command_exits_non_zero_on_a_truncated_checkpoint(ckpt_dir):
    path = ckpt_dir / "cut.safetensors"
    path.write_bytes((ckpt_dir / "train_reference_seed0.safetensors").read_bytes()[:500])
    cmd = [sys.executable, "-m", "rmsnorm_kernel.experiment.reload", "--ckpt", str(path)]
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
    path = ckpt_dir / "train_reference_seed0.safetensors"
    _rewrite(path, lambda t, m: t["fc2.bias"].add_(1e-3))
    with pytest.raises(CheckpointError, match="train_reference_seed0.*predictions differ"):
        check_checkpoints([path])


def test_weights_of_another_net_are_a_mismatch(ckpt_dir):
    path = ckpt_dir / "train_reference_seed0.safetensors"

    def wider(tensors, meta):
        net = json.loads(meta["net"])
        net["hidden_features"] += 1
        meta["net"] = json.dumps(net)

    _rewrite(path, wider)
    with pytest.raises(CheckpointError, match="train_reference_seed0.*do not match"):
        check_checkpoints([path])


def test_foreign_safetensors_file_is_refused(tmp_path):
    path = tmp_path / "foreign.safetensors"
    save_file({"w": torch.ones(2)}, str(path))
    with pytest.raises(CheckpointError, match="foreign.safetensors: not an experiment checkpoint"):
        check_checkpoints([path])


def test_reload_cli_passes_on_good_checkpoints(ckpt_dir, capsys):
    assert main(["--root", str(ckpt_dir)]) == 0
    assert "2 checkpoint(s) reload bit for bit" in capsys.readouterr().out

"""`make train` as a user runs it: a Hydra multirun subprocess, its last line and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from experiment_helpers import SMALL


def _multirun(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "rmsnorm_kernel.train",
        "--multirun",
        "norm=reference,triton",
        *SMALL,
        "trainer.max_steps=5",
        "trainer.val_check_interval=5",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"paths.checkpoint_dir={tmp_path / 'ckpt'}",
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_multirun_compares_the_branches_and_exits_zero(tmp_path):
    proc = _multirun(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last == str(tmp_path / "sweep" / "comparison.json")
    result = json.loads(Path(last).read_text())
    assert result["passed"] and set(result["branches"]) == {"reference", "triton"}
    assert result["branches"]["triton"]["forward_calls"] == 5
    assert (tmp_path / "sweep" / "loss_curves.png").is_file()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "train_reference_seed0.safetensors",
        "train_triton_seed0.safetensors",
    ]
    assert not (tmp_path / "outputs").exists()  # the sweep dir override moved everything


def test_multirun_exits_non_zero_when_the_tolerance_is_exceeded(tmp_path):
    proc = _multirun(tmp_path, "compare.delta_test_mse_tolerance=-1")
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].endswith("comparison.json")

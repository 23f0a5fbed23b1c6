"""The console scripts that pyproject.toml declares run from any folder (not only the repo root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def _run(*cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)


def test_rmsnorm_cli_lists_the_commands(tmp_path):
    res = _run(str(BIN / "rmsnorm-cli"), "--help", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "check-forward" in res.stdout and "check-checkpoints" in res.stdout


def test_rmsnorm_train_composes_the_repository_config(tmp_path):
    res = _run(str(BIN / "rmsnorm-train"), "--cfg", "job", "norm=triton", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "name: triton" in res.stdout

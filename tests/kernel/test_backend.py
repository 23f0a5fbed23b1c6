"""The backend choice: interpreter without CUDA, compiled with it, an explicit setting wins."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

PROBE = (
    "import logging, os; logging.basicConfig(level=logging.INFO);"
    "import rmsnorm_kernel as rk;"
    "print('BACKEND', rk.BACKEND, os.environ.get('TRITON_INTERPRET'))"
)


def _run(env_value: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if env_value is not None:
        env["TRITON_INTERPRET"] = env_value
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA default")
def test_no_cuda_chooses_the_interpreter_and_logs_it():
    out = _run(None)
    assert out.returncode == 0, out.stderr
    assert "BACKEND interpreter 1" in out.stdout
    assert "CUDA is not available" in out.stderr  # the choice is logged


def test_explicit_setting_wins():
    out = _run("1")
    assert out.returncode == 0, out.stderr
    assert "BACKEND interpreter 1" in out.stdout
    assert "set by the user" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_compiled_backend_refuses_cpu_tensors_clearly():
    code = (
        "import torch, rmsnorm_kernel as rk\n"
        "try:\n    rk.rmsnorm(torch.ones(2, 4), None, 1e-6)\n"
        "except ValueError as e:\n    print('REFUSED', e)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert "REFUSED x must be on a CUDA device" in out.stdout, out.stdout + out.stderr

"""DTensor inputs (tensor / sequence parallelism) over 2 ranks: each rank normalises its local
rows, with F.rms_norm's values, gradients and placements (the weight's gradient Partial where x is
sharded), uneven shards, the fused residual and Llama's rounding; layouts that would need another
rank's values are refused; the Liger drop-in gathers a DTensor as Liger-Kernel does. The ranks
are two processes of ``dtensor_worker.py`` (gloo on CPU; NCCL with one GPU each when compiled)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rmsnorm_kernel as rk

WORKER = Path(__file__).with_name("dtensor_worker.py")


@pytest.mark.skipif(
    not torch.distributed.is_available(), reason="this torch build has no torch.distributed"
)
def test_dtensor_over_two_ranks(tmp_path):
    if rk.BACKEND == "cuda" and torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (one NCCL rank each)")
    init = tmp_path / "init"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), "2", str(init)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for rank in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, f"rank {rank} failed:\n{out[-4000:]}"

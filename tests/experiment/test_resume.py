"""Exact resume: stopping at step k and resuming from last.ckpt ends bitwise where never stopping
ends (weights, test MSE, every logged loss after k), at an epoch boundary, mid-epoch, and after
SIGTERM or Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from experiment_helpers import ENV, SMALL, run
from safetensors.torch import load_file
from tbparse import SummaryReader

from rmsnorm_kernel.experiment.run import CTRL_C_EXIT, SIGTERM_EXIT

#: SMALL serves 256 // 32 = 8 batches per epoch; validation every 5 steps.
BATCHES_PER_EPOCH = 8
STEPS = 20
COMMON = ("norm=torch", "trainer.val_check_interval=5")


def _losses(metrics: dict, tag: str) -> dict[int, float]:
    frame = SummaryReader(metrics["log_dir"]).scalars
    rows = frame[frame.tag == tag]
    return dict(zip(rows.step.tolist(), rows.value.tolist(), strict=True))


def _assert_same_end(resumed: dict, whole: dict, k: int) -> None:
    assert resumed["train_steps"] == whole["train_steps"]  # the total, not the session's
    assert resumed["session_steps"] == whole["train_steps"] - k
    assert resumed["test/mse"] == whole["test/mse"]  # bitwise: exact float equality
    a, b = load_file(resumed["checkpoint"]), load_file(whole["checkpoint"])
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].numpy().tobytes() == b[key].numpy().tobytes(), key
    after = {s: v for s, v in _losses(whole, "train/loss").items() if s >= k}
    assert after and {s: v for s, v in _losses(resumed, "train/loss").items() if s >= k} == after
    whole_val = {s: v for s, v in _losses(whole, "val/loss").items() if s > k}
    resumed_val = _losses(resumed, "val/loss")
    assert whole_val and all(resumed_val[s] == v for s, v in whole_val.items())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    return run(tmp_path_factory.mktemp("whole"), *COMMON, f"trainer.max_steps={STEPS}")


@pytest.mark.parametrize("k", [BATCHES_PER_EPOCH, 12], ids=["epoch_boundary", "mid_epoch"])
def test_resume_is_bitwise_identical(k, uninterrupted, tmp_path):
    first = run(tmp_path / "a", *COMMON, f"trainer.max_steps={k}")
    last = Path(first["output_dir"]) / "lightning_checkpoints" / "last.ckpt"
    resumed = run(tmp_path / "b", *COMMON, f"trainer.max_steps={STEPS}", f"ckpt_path={last}")
    _assert_same_end(resumed, uninterrupted, k)


@pytest.mark.parametrize(
    "sig,name,code",
    [(signal.SIGTERM, "SIGTERM", SIGTERM_EXIT), (signal.SIGINT, "Ctrl-C", CTRL_C_EXIT)],
    ids=["sigterm", "ctrl_c"],
)
def test_signal_saves_last_ckpt_exits_non_zero_and_resumes_identically(sig, name, code, tmp_path):
    """A real process on CPU: a signal mid-training, then resume in this process."""
    # PyTorch's norm: the kernels are not the point here, and 300 of its steps take seconds.
    steps = 300
    args = ("norm=torch", "trainer.val_check_interval=50", f"trainer.max_steps={steps}")
    run_dir = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "rmsnorm_kernel.train",
        *SMALL,
        *args,
        f"hydra.run.dir={run_dir}",
        f"paths.checkpoint_dir={tmp_path / 'ckpt'}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    probe = run_dir / "initial_probe.safetensors"  # written when training starts
    deadline = time.monotonic() + 120
    while not probe.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # some steps in, well before the end
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-3000:]
    last = run_dir / "lightning_checkpoints" / "last.ckpt"
    assert f"resume with the same command plus: ckpt_path={last}" in out
    k = int(out.split(f"{name} at step ")[1].split(":")[0])
    assert 0 < k < steps
    assert not (run_dir / "metrics.json").exists()  # the run did not report success

    resumed = run(tmp_path / "resumed", *args, f"ckpt_path={last}")
    whole = run(tmp_path / "whole", *args)
    _assert_same_end(resumed, whole, k)

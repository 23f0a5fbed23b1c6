"""Exact resume: stopping at step k and resuming from last.ckpt ends bitwise where never stopping
ends (weights, test MSE, every logged loss after k), at an epoch boundary, mid-epoch, and after
SIGTERM or Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from experiment_helpers import ENV, run, train_command
from safetensors.torch import load_file
from tbparse import SummaryReader

from rmsnorm_kernel.experiment.core.run import CTRL_C_EXIT, SIGTERM_EXIT

#: debug=cpu_small serves 256 // 32 = 8 batches per epoch; validation every 5 steps.
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
    # Step for step: the resumed run logs exactly the uninterrupted run's steps k.. (no shift).
    after = {s: v for s, v in _losses(whole, "train/loss").items() if s >= k}
    resumed_train = _losses(resumed, "train/loss")
    assert after and sorted(resumed_train) == sorted(after) == list(range(k, whole["train_steps"]))
    assert resumed_train == after
    whole_val = {s: v for s, v in _losses(whole, "val/loss").items() if s >= k}
    resumed_val = {s: v for s, v in _losses(resumed, "val/loss").items() if s >= k}
    assert whole_val and resumed_val == whole_val


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
    # PyTorch's norm: the kernels are not the point here. ~1.2 ms a step on a 2-core CPU, so
    # 3000 steps last ~4 s and the signal sent ~0.3 s in lands mid-training even when this
    # process is starved of CPU. (With 300, ~0.4 s, a loaded CI machine once saw the child
    # finish before its signal arrived.)
    steps = 3000
    args = ("norm=torch", "trainer.val_check_interval=50", f"trainer.max_steps={steps}")
    run_dir = tmp_path / "killed"
    cmd = train_command(
        *args, f"hydra.run.dir={run_dir}", f"paths.checkpoint_dir={tmp_path / 'ckpt'}"
    )
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


#: Where in a step the stop request lands (COMMON: validation after steps 5, 10, 15; 8 steps an
#: epoch). Lightning stops after the step whatever the point, but a checkpoint saved after a step
#: that ran validation used to resume its curves one step late (seen on the H200, where the first
#: validation is slow enough to catch the signal).
LANDINGS = [
    ("on_before_optimizer_step", 11),  # mid-step, after backward, before the optimizer step
    ("on_train_batch_end", 12),  # after the optimizer step, before logging
    ("on_train_batch_end", 10),  # after step 10, which then validates
    ("on_validation_start", 10),  # during validation
    ("on_before_optimizer_step", 14),  # mid-step 15, which then validates
    ("on_train_batch_end", 8),  # the epoch's last step
    ("on_train_batch_start", 15),  # before step 16 starts
]


@pytest.mark.parametrize("hook,step", LANDINGS, ids=[f"{h}@{s}" for h, s in LANDINGS])
def test_resumed_curves_match_step_for_step_wherever_the_signal_lands(
    hook, step, uninterrupted, tmp_path
):
    signal_at = [  # experiment_helpers.SignalAt
        "+callbacks.signal_at._target_=experiment_helpers.SignalAt",
        f"+callbacks.signal_at.hook={hook}",
        f"+callbacks.signal_at.step={step}",
    ]
    with pytest.raises(SystemExit) as stopped:
        run(tmp_path / "a", *COMMON, f"trainer.max_steps={STEPS}", *signal_at)
    assert stopped.value.code == SIGTERM_EXIT
    last = tmp_path / "a" / "run" / "lightning_checkpoints" / "last.ckpt"
    resumed = run(tmp_path / "b", *COMMON, f"trainer.max_steps={STEPS}", f"ckpt_path={last}")
    k = STEPS - resumed["session_steps"]
    assert k == (step if hook in ("on_train_batch_end", "on_validation_start") else step + 1)
    _assert_same_end(resumed, uninterrupted, k)


def test_a_run_refuses_another_branchs_or_configs_last_ckpt_before_fit(tmp_path):
    from rmsnorm_kernel.experiment.core.settings import SettingsError

    first = run(tmp_path / "triton_run", "norm=torch", "trainer.max_steps=2", "test=false")
    last = Path(first["output_dir"]) / "lightning_checkpoints" / "last.ckpt"
    assert last.is_file()
    with pytest.raises(SettingsError) as refused:
        run(tmp_path / "ref", "norm=reference", "trainer.max_steps=4", f"ckpt_path={last}")
    assert str(refused.value) == (
        f"ckpt_path must be a checkpoint of this branch (norm=reference); {last} is norm=torch's: "
        "resume each branch from its own last.ckpt (ckpt_path=auto finds it)"
    )
    with pytest.raises(SettingsError) as refused:
        run(tmp_path / "lr", "norm=torch", "model.optimizer.lr=0.002", f"ckpt_path={last}")
    assert str(refused.value) == (
        f"ckpt_path must be a checkpoint of this config; {last} was saved with "
        "model.optimizer.lr=0.001 (this run 0.002)"
    )
    assert not (tmp_path / "ref").exists() and not (tmp_path / "lr").exists()  # nothing written
    # The same branch and config resumes, with any step budget.
    resumed = run(tmp_path / "same", "norm=torch", "trainer.max_steps=4", f"ckpt_path={last}")
    assert resumed["session_steps"] == 2 and resumed["resumed_from"] == str(last)


def test_an_interrupted_sweep_resumes_each_branch_from_its_own_last_ckpt(tmp_path):
    """Ctrl-C in the first job of a sweep; the same command plus ckpt_path=auto resumes that
    branch from its own last.ckpt and starts the branch that never ran from step 0."""
    sweep = ["norm=torch,reference", "trainer.max_steps=6"]
    sweep += [f"paths.checkpoint_dir={tmp_path / 'ckpt'}", f"paths.runs_root={tmp_path}"]
    signal_at = ["+callbacks.signal_at._target_=experiment_helpers.SignalAt"]
    signal_at += ["+callbacks.signal_at.hook=on_train_batch_end", "+callbacks.signal_at.step=3"]
    signal_at += [f"+callbacks.signal_at.signum={int(signal.SIGINT)}"]
    # experiment_helpers (for SignalAt) first, then whatever path found the package itself (the
    # GPU box imports it from PYTHONPATH, not from an installed venv).
    paths = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    env = {**ENV, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}

    def sweep_run(name: str, *extra: str) -> subprocess.CompletedProcess:
        cmd = train_command(*sweep, *extra, f"hydra.sweep.dir={tmp_path / name}", multirun=True)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)

    stopped = sweep_run("first", *signal_at)
    assert stopped.returncode == CTRL_C_EXIT, stopped.stderr[-3000:]
    assert "resume the sweep with the same command plus: ckpt_path=auto" in stopped.stdout
    own = tmp_path / "first" / "0_torch" / "lightning_checkpoints" / "last.ckpt"
    assert own.is_file() and not (tmp_path / "first" / "1_reference").exists()

    resumed = sweep_run("second", "ckpt_path=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "PASSED" in resumed.stdout.splitlines()
    torch_run = json.loads((tmp_path / "second" / "0_torch" / "metrics.json").read_text())
    reference = json.loads((tmp_path / "second" / "1_reference" / "metrics.json").read_text())
    assert torch_run["resumed_from"] == str(own)
    assert (torch_run["train_steps"], torch_run["session_steps"]) == (6, 3)
    assert reference["resumed_from"] is None
    assert (reference["train_steps"], reference["session_steps"]) == (6, 6)


def test_training_on_in_the_same_dir_overwrites_its_last_ckpt(tmp_path):
    """Resuming into the run's own dir (the resume command a stopped run prints, with
    hydra.run.dir kept) saved the new state as last-v1.ckpt beside the old last.ckpt, so the
    next resume silently restarted from the old step."""
    import torch

    signal_at = [  # Ctrl-C after step 2: the interrupt callback saves last.ckpt
        "+callbacks.signal_at._target_=experiment_helpers.SignalAt",
        "+callbacks.signal_at.hook=on_train_batch_end",
        "+callbacks.signal_at.step=2",
        f"+callbacks.signal_at.signum={int(signal.SIGINT)}",
    ]
    with pytest.raises(SystemExit) as stopped:
        run(tmp_path, "norm=torch", "trainer.max_steps=6", "test=false", *signal_at)
    assert stopped.value.code == CTRL_C_EXIT
    ckpts = tmp_path / "run" / "lightning_checkpoints"
    last = ckpts / "last.ckpt"
    second = run(tmp_path, "norm=torch", "trainer.max_steps=6", f"ckpt_path={last}", "test=false")
    assert second["session_steps"] == 4
    assert sorted(p.name for p in ckpts.iterdir()) == ["last.ckpt"]
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 6

"""train(cfg) end to end: a fast dev run, the full 100-step Triton run, a warm start."""

from __future__ import annotations

import json

import pytest
from experiment_helpers import compose_cfg, run
from tbparse import SummaryReader

from rmsnorm_kernel.experiment.core.run import train
from rmsnorm_kernel.experiment.exports.reload import check_checkpoints


def test_fast_dev_run(tmp_path):
    m = run(tmp_path, "norm=triton", "+trainer.fast_dev_run=true")
    assert m["train_steps"] == 1 and m["forward_calls"] == m["backward_calls"] == 1
    assert m["reload_max_diff"] == 0.0
    assert set(m["phase_s"]) == {"build", "fit", "test"}
    assert all(v >= 0 for v in m["phase_s"].values())
    assert sum(m["phase_s"].values()) <= m["wall_time_s"]


def test_output_dir_is_required(tmp_path):
    with pytest.raises(ValueError, match=r"^paths\.output_dir must be a non-empty directory path"):
        train(compose_cfg())


@pytest.mark.slow
def test_full_100_step_triton_run(tmp_path):
    """The tutorial's schedule through the Triton kernels (interpreter on CPU), every check on."""
    m = run(tmp_path, "norm=triton")
    assert m["train_steps"] == 100
    assert m["forward_calls"] == m["backward_calls"] == m["expected_calls"] == 100
    assert m["reload_max_diff"] == 0.0 and m["reload_tensor_max_diff"] == 0.0
    assert 0 < m["test/mse"] < 1
    assert m["checkpoint"] == str(
        tmp_path / "ckpt" / f"train_triton_seed0_{m['config_hash']}.safetensors"
    )
    out = tmp_path / "run"
    assert json.loads((out / "metrics.json").read_text()) == m
    assert (out / "initial_probe.safetensors").is_file()
    assert m["log_dir"] == str(out / "tensorboard" / "norm=triton,seed=0")
    scalars = SummaryReader(m["log_dir"]).scalars
    train_steps = scalars[scalars.tag == "train/loss"].step.tolist()
    assert train_steps == list(range(100))  # train/loss at every step
    assert set(scalars.tag) >= {"train/loss", "val/loss", "test/mse"}
    losses = scalars[scalars.tag == "train/loss"].value.tolist()
    assert sum(losses[-10:]) < sum(losses[:10])  # it learned
    assert check_checkpoints(root=tmp_path / "ckpt")[0]["reload_max_diff"] == 0.0


def test_warm_start_from_safetensors(tmp_path):
    first = run(tmp_path / "a", "trainer.max_steps=3", "test=false")
    second = run(tmp_path / "b", "trainer.max_steps=3", f"ckpt_path={first['checkpoint']}")
    assert second["train_steps"] == 3 and second["reload_max_diff"] == 0.0

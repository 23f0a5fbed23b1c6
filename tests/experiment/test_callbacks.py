"""Each check fails the run loudly when what it checks is wrong."""

from __future__ import annotations

import pytest
from experiment_helpers import run

from rmsnorm_kernel.experiment.core.callbacks import CheckFailed


def test_call_counter_fails_a_branch_that_never_reached_the_kernels(tmp_path):
    # Asked for the kernels (1 call per step) but built the reference: must not pass silently.
    with pytest.raises(CheckFailed, match=r"forward 0, backward 0; expected 3 each"):
        run(
            tmp_path,
            "norm=reference",
            "callbacks.kernel_calls.calls_per_step=1",
            "trainer.max_steps=3",
        )


def test_call_counter_fails_unexpected_kernel_calls(tmp_path):
    with pytest.raises(CheckFailed, match=r"forward 2, backward 2; expected 0 each"):
        run(
            tmp_path,
            "norm=triton",
            "callbacks.kernel_calls.calls_per_step=0",
            "trainer.max_steps=2",
        )


def test_call_counter_ignores_validation_and_test_forwards(tmp_path):
    # Validation every step and a test pass also go through the wrapper, outside the count.
    m = run(tmp_path, "norm=triton", "trainer.max_steps=3", "trainer.val_check_interval=1")
    assert (m["forward_calls"], m["backward_calls"], m["train_steps"]) == (3, 3, 3)


def test_test_metric_ceiling_fails_the_run(tmp_path):
    with pytest.raises(CheckFailed, match="test/mse .* above the configured ceiling"):
        run(tmp_path, "norm=torch", "trainer.max_steps=2", "callbacks.test_metric.max_value=1e-12")


def test_a_test_metric_the_module_never_logs_fails_the_run(tmp_path):
    with pytest.raises(CheckFailed, match=r"test/loss was not logged .*test/mse"):
        run(tmp_path, "norm=torch", "trainer.max_steps=1", "compare.metric=test/loss")

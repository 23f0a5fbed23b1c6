"""What names a run: the config hash (checkpoint names) and the TensorBoard run label."""

from __future__ import annotations

from experiment_helpers import compose_cfg

from rmsnorm_kernel.experiment.core.identity import config_hash, run_label, short_names


def test_config_hash_follows_what_is_trained_not_where_it_is_written(tmp_path):
    base = config_hash(compose_cfg([], tmp_path / "a"))
    assert len(base) == 12 and int(base, 16) >= 0
    assert config_hash(compose_cfg([], tmp_path / "b")) == base  # other output/checkpoint dirs
    assert config_hash(compose_cfg(["callbacks.test_metric.max_value=1"], tmp_path)) == base
    for change in ("seed=1", "norm=triton", "model.optimizer.lr=0.01", "trainer.max_steps=5"):
        assert config_hash(compose_cfg([change], tmp_path)) != base, change


def test_run_label_outside_a_sweep_names_branch_and_seed():
    assert run_label(compose_cfg(["norm=triton", "seed=3"])) == "norm=triton,seed=3"


def test_short_names_keep_the_last_part_unless_it_is_shared():
    keys = ["model.net.hidden_features", "model.optimizer.lr", "seed", "dataset.seed"]
    assert short_names(keys) == {
        "model.net.hidden_features": "hidden_features",
        "model.optimizer.lr": "lr",
        "seed": "seed",
        "dataset.seed": "dataset.seed",
    }

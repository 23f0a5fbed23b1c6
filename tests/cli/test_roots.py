"""The command set composes from its own root: none of its configs is a training experiment."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from rmsnorm_kernel.cli.main import CONF_DIR


def test_exercise_is_not_a_training_experiment():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="t"):
        with pytest.raises(ConfigCompositionException, match="exercise"):
            compose(config_name="train", overrides=["experiment=exercise"])

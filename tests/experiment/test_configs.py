"""What the configs make the code do: validation errors, branch swapping, separate roots."""

from __future__ import annotations

import math

import pytest
import torch
from experiment_helpers import compose_cfg, run
from hydra.errors import InstantiationException
from hydra.utils import instantiate

import rmsnorm_kernel
from rmsnorm_kernel.experiment.core.builders import SpecError
from rmsnorm_kernel.experiment.core.norms import ReferenceRMSNorm
from rmsnorm_kernel.experiment.core.run import _callbacks, build, train
from rmsnorm_kernel.experiment.core.settings import SettingsError, check_compare_settings
from rmsnorm_kernel.experiment.mlp.data import SyntheticDataModule
from rmsnorm_kernel.experiment.mlp.module import RegressionModule
from rmsnorm_kernel.experiment.mlp.net import MLP

#: The options of the MLP experiment; other models bring their own groups and experiment files.
MLP_OPTIONS = [
    ("dataset", "synthetic"),
    ("model", "mlp"),
    ("norm", "reference"),
    ("norm", "torch"),
    ("norm", "triton"),
    ("trainer", "default"),
    ("callbacks", "default"),
    ("logger", "tensorboard"),
    ("compare", "default"),
]


#: The layer each norm option puts in the MLP.
NORM_LAYERS = {
    "reference": ReferenceRMSNorm,
    "torch": torch.nn.RMSNorm,
    "triton": rmsnorm_kernel.RMSNorm,
}


@pytest.mark.parametrize("group,option", MLP_OPTIONS, ids=lambda v: str(v))
def test_every_mlp_option_builds_what_train_builds(group, option, tmp_path):
    cfg = compose_cfg([f"{group}={option}"], tmp_path)
    cfg.config_hash, cfg.run_label = "0123456789ab", "label"  # train() fills these
    datamodule, model = build(cfg)  # what train(cfg) builds, with the same seeding
    assert isinstance(datamodule, SyntheticDataModule)
    assert isinstance(model, RegressionModule) and isinstance(model.net, MLP)
    assert type(model.net.norm) is NORM_LAYERS[cfg.norm.name]
    callbacks = _callbacks(cfg)
    assert set(callbacks) == {name for name, node in cfg.callbacks.items() if node is not None}
    for name, callback in callbacks.items():
        assert type(callback).__name__ == cfg.callbacks[name]._target_.rpartition(".")[2]
    logger = instantiate(cfg.logger)
    trainer = instantiate(cfg.trainer, callbacks=list(callbacks.values()), logger=logger)
    assert trainer.max_steps == cfg.trainer.max_steps and trainer.logger is logger
    assert all(c in trainer.callbacks for c in callbacks.values())
    assert type(logger).__name__ == cfg.logger._target_.rpartition(".")[2]


@pytest.mark.parametrize(
    "key,value,rule",
    [
        ("delta_metric_tolerance", -1e-3, "a finite number >= 0"),
        ("delta_metric_tolerance", math.nan, "a finite number >= 0"),
        ("initial_error_tolerance", math.inf, "a finite number >= 0"),
        ("initial_error_tolerance", "1e-5", "a number"),
        ("initial_error_tolerance", True, "a number"),
        ("baseline", "", "a non-empty string"),
        ("metric", None, "a non-empty string"),
    ],
)
def test_compare_settings_refuse_a_bad_value_naming_the_key(key, value, rule):
    settings = dict(compose_cfg(small=False).compare)
    settings[key] = value
    with pytest.raises(SettingsError, match=rf"compare\.{key} must be {rule}"):
        check_compare_settings(settings)


def test_train_refuses_a_negative_tolerance_before_writing_anything(tmp_path):
    cfg = compose_cfg(["compare.delta_metric_tolerance=-1"], tmp_path)
    with pytest.raises(SettingsError, match=r"compare\.delta_metric_tolerance must be"):
        train(cfg)
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_a_net_config_that_could_not_be_reloaded_fails_before_training(tmp_path):
    # The builder's own rules, run by the config check before anything is built or written.
    with pytest.raises(
        SettingsError, match=r"^model\.net\.hidden_features: must be an integer >= 1"
    ):
        run(tmp_path, "model.net.hidden_features=0")
    with pytest.raises(
        SettingsError, match=r"^model\.net\.norm: unknown norm 'rocket'; allowed: \["
    ):
        run(tmp_path, "model.net.norm=rocket")
    assert not (tmp_path / "run").exists()
    # Built directly (a reload), the builder refuses the same values itself.
    refused = (SpecError, InstantiationException)  # Hydra wraps errors raised while building
    with pytest.raises(refused, match=r"net\.hidden_features: must be an integer >= 1"):
        instantiate(compose_cfg(["model.net.hidden_features=0"]).model.net)


@pytest.mark.parametrize(
    "norm,cls,calls",
    [
        ("reference", ReferenceRMSNorm, 0),
        ("triton", rmsnorm_kernel.RMSNorm, 1),
        ("torch", torch.nn.RMSNorm, 0),
    ],
)
def test_norm_group_swaps_the_layer_and_the_expected_kernel_calls(norm, cls, calls):
    cfg = compose_cfg([f"norm={norm}"])
    net = instantiate(cfg.model.net)
    assert type(net.norm) is cls
    assert net.norm.eps == cfg.model.net.eps
    assert instantiate(cfg.callbacks.kernel_calls).calls_per_step == calls


def test_training_root_holds_no_command_set_groups():
    # A training run logs its whole config as hyperparameters: command-set groups (campaign,
    # benchmark, exercise) would bury the run's own settings.
    cfg = compose_cfg(small=False, return_hydra_config=True)
    choices = set(cfg.hydra.runtime.choices)
    assert not choices & {"campaign", "benchmark", "exercise"}
    assert not {"campaign", "benchmark", "exercise"} & set(cfg)


def test_progress_bar_counts_steps_against_the_budget_across_epochs(tmp_path):
    from rmsnorm_kernel.experiment.core.progress import StepProgressBar
    from rmsnorm_kernel.experiment.core.run import build

    cfg = compose_cfg(["norm=torch"], tmp_path)
    bar = StepProgressBar()
    datamodule, model = build(cfg)
    trainer = instantiate(
        cfg.trainer,
        max_steps=10,
        callbacks=[bar],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=True,
    )
    assert trainer.max_epochs == -1  # the step budget alone ends training
    trainer.fit(model, datamodule=datamodule)  # 8 batches per epoch: 10 steps span 2 epochs
    (train_task,) = [t for t in bar.progress.tasks if t.description.startswith("Training")]
    assert (train_task.completed, train_task.total) == (10, 10)
    assert train_task.description.strip() == "Training (epoch 1)"
    speed = [c for c in bar.configure_columns(trainer) if "Speed" in type(c).__name__][0]
    trainer.test(model, datamodule=datamodule, verbose=False)  # one batch: no speed measured
    (test_task,) = [t for t in bar.progress.tasks if t.description.startswith("Testing")]
    assert test_task.speed is None and speed.render(test_task).plain == ""

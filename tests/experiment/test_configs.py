"""Compose-API tests: every config group option and every experiment composes and instantiates."""

from __future__ import annotations

import pytest
import torch
from experiment_helpers import compose_cfg
from hydra.utils import instantiate

import rmsnorm_kernel
from rmsnorm_kernel.experiment.norms import ReferenceRMSNorm
from rmsnorm_kernel.experiment.paths import CONFIG_DIR

GROUPS = ["dataset", "model", "norm", "trainer", "callbacks", "logger", "compare"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "group,option", [(g, o) for g in GROUPS for o in options(g)], ids=lambda v: str(v)
)
def test_every_group_option_composes_and_instantiates(group, option, tmp_path):
    cfg = compose_cfg([f"{group}={option}"], tmp_path)
    assert cfg[group] is not None
    # Everything train(cfg) instantiates must build from the composed config.
    instantiate(cfg.dataset)
    instantiate(cfg.model)
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c is not None]
    logger = instantiate(cfg.logger)
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=logger)
    assert trainer.max_steps == cfg.trainer.max_steps


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_composes(experiment):
    cfg = compose_cfg([f"experiment={experiment}"], small=False, return_hydra_config=True)
    assert cfg.hydra.runtime.choices.experiment == experiment
    # The seed CLI composes this same root config: its groups must be there.
    assert "campaign" in cfg and "benchmark" in cfg


def test_minimum_is_the_seed_configuration():
    cfg = compose_cfg(["experiment=minimum"], small=False)
    assert cfg.task_name == "minimum"
    assert cfg.trainer.max_steps == 100
    assert cfg.dataset.batch_size == 32
    assert cfg.model.optimizer._target_ == "torch.optim.Adam"
    assert cfg.model.net.eps == 1e-6


@pytest.mark.parametrize(
    "norm,cls,calls",
    [
        ("reference", ReferenceRMSNorm, 0),
        ("triton", rmsnorm_kernel.RMSNorm, 1),
        ("torch", torch.nn.RMSNorm, 0),
    ],
)
def test_norm_group_swaps_the_branch(norm, cls, calls):
    cfg = compose_cfg([f"norm={norm}"])
    net = instantiate(cfg.model.net)
    assert type(net.norm) is cls
    assert net.norm.eps == cfg.model.net.eps
    assert cfg.norm.name == norm and cfg.norm.calls_per_step == calls
    assert cfg.run_name == f"train_{norm}_seed0"


def test_hydra_writes_under_outputs_and_compares_after_a_sweep():
    cfg = compose_cfg(small=False, return_hydra_config=True)
    assert cfg.hydra.run.dir.startswith("outputs/")
    assert cfg.hydra.sweep.dir.startswith("outputs/")
    assert cfg.hydra.callbacks.compare._target_.endswith("compare.CompareOnMultirunEnd")
    assert cfg.hydra.job.chdir is False


def test_defaults_match_the_issue():
    cfg = compose_cfg(small=False)
    assert cfg.trainer.max_steps == 100 and cfg.dataset.batch_size == 32
    assert cfg.trainer.accelerator == "auto"
    assert cfg.norm.name == cfg.compare.baseline == "reference"
    assert cfg.compare.delta_test_mse_tolerance > 0
    assert cfg.logger._target_.endswith("TensorBoardLogger")
    assert cfg.callbacks.rich_progress_bar._target_.endswith("RichProgressBar")
    assert cfg.paths.output_dir is None  # filled by the @hydra.main shell

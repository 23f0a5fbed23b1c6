"""Issue 19's CPU parts: LLM-width runs write no Lightning checkpoint and no export unless asked,
and a resume that needs one is refused.

The LLM-width configs are composed and their trainer built (never trained: hundreds of millions of
weights). The same switches on the tiny Llama, trained, are tested in ``test_llama_train`` (the
planted-branch sweep, which shares that module's hf and triton runs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import open_dict

from rmsnorm_kernel.experiment.core.callbacks import SafetensorsCheckpoint, SaveOnInterrupt
from rmsnorm_kernel.experiment.core.run import _fill_identity, build_trainer
from rmsnorm_kernel.experiment.core.settings import SettingsError, check_train_config
from rmsnorm_kernel.paths import config_dir


def compose_llama(*overrides: str):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def built(tmp_path: Path, *overrides: str):
    """The trainer and callbacks ``train(cfg)`` would build (no model, no data, no fit)."""
    cfg = compose_llama(
        *overrides,
        f"paths.output_dir={tmp_path / 'run'}",
        f"paths.checkpoint_dir={tmp_path / 'ckpt'}",
    )
    _fill_identity(cfg)
    trainer, callbacks, _ = build_trainer(cfg)
    return cfg, trainer, callbacks


@pytest.mark.parametrize("experiment", ["llama_h200", "llama_h200_2048"])
def test_llm_width_builds_no_checkpoint_and_no_export(experiment, tmp_path):
    cfg, trainer, callbacks = built(tmp_path, f"experiment={experiment}", "~logger")
    assert cfg.trainer.enable_checkpointing is False
    assert trainer.checkpoint_callbacks == []  # not ours, not Lightning's default either
    kinds = (ModelCheckpoint, SaveOnInterrupt, SafetensorsCheckpoint)
    assert not [c for c in trainer.callbacks if isinstance(c, kinds)]
    assert {"kernel_calls", "initial_probe", "test_metric", "throughput"} <= callbacks.keys()
    assert cfg.callbacks.safetensors_checkpoint is None


def test_llm_width_checkpoint_and_export_when_asked(tmp_path):
    _, trainer, callbacks = built(
        tmp_path,
        "experiment=llama_h200",
        "~logger",
        "callbacks=lm",
        "trainer.enable_checkpointing=true",
    )
    (ckpt,) = trainer.checkpoint_callbacks  # ours: last.ckpt at the last step only
    assert ckpt.save_last and ckpt._every_n_train_steps == 30 and ckpt._every_n_epochs == 0
    assert isinstance(callbacks["save_on_interrupt"], SaveOnInterrupt)
    assert isinstance(callbacks["safetensors_checkpoint"], SafetensorsCheckpoint)


def test_null_model_checkpoint_lets_lightning_add_none(tmp_path):
    _, trainer, _ = built(tmp_path, "callbacks.model_checkpoint=null", "~logger")
    assert trainer.checkpoint_callbacks == []


@pytest.mark.parametrize("ckpt", ["auto", "last.ckpt"])
def test_resume_without_checkpointing_is_refused(ckpt, tmp_path):
    (tmp_path / "last.ckpt").write_bytes(b"x")
    path = "auto" if ckpt == "auto" else str(tmp_path / ckpt)
    cfg = compose_llama(
        "experiment=llama_h200",
        f"ckpt_path={path}",
        f"paths.output_dir={tmp_path / 'run'}",
        f"paths.checkpoint_dir={tmp_path / 'ckpt'}",
    )
    with pytest.raises(SettingsError, match=r"^ckpt_path resumes .* trainer\.enable_checkpointing"):
        check_train_config(cfg)
    with open_dict(cfg):
        cfg.trainer.enable_checkpointing = True
    if ckpt == "auto":
        check_train_config(cfg)  # asked for: allowed
    else:  # asked for: allowed; then the file itself is read, and it is no checkpoint
        with pytest.raises(SettingsError, match=r"^ckpt_path must be a Lightning checkpoint of "):
            check_train_config(cfg)

"""``train(cfg) -> metrics``: one run of the main job, from a composed Hydra config.

Called by the ``@hydra.main`` shell (``python -m rmsnorm_kernel.train``) and directly by tests
with a config from the compose API. Everything the run writes goes under ``cfg.paths.output_dir``
except the exported weights (``cfg.paths.checkpoint_dir``).
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from .checkpoint import load_checkpoint

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"


def build(cfg: DictConfig) -> tuple[L.LightningDataModule, L.LightningModule]:
    """Seed everything, then build the datamodule and the LightningModule.

    The seed is set immediately before the model is built, and no norm draws random numbers, so
    every branch with the same ``cfg.seed`` starts from bitwise-equal weights.
    """
    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.dataset)
    model = instantiate(cfg.model)
    return datamodule, model


def _callbacks(cfg: DictConfig) -> dict[str, L.Callback]:
    """``cfg.callbacks`` built, by name (a ``null`` entry switches a callback off)."""
    return {
        name: instantiate(node)
        for name, node in (cfg.get("callbacks") or {}).items()
        if node is not None and "_target_" in node
    }


def _warm_start(model: L.LightningModule, ckpt_path: str) -> None:
    """Start from the weights of an exported safetensors checkpoint (its reload is checked)."""
    tensors, _ = load_checkpoint(Path(ckpt_path))
    model.net.load_state_dict({k: tensors[k] for k in model.net.state_dict()}, strict=True)
    log.info("initial weights from %s", ckpt_path)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, check and test one branch; return its metrics (also written to ``metrics.json``).

    Returns:
        ``{"run_name", "norm", "seed", "test_mse", "forward_calls", "backward_calls",
        "expected_calls", "train_steps", "reload_max_diff", "reload_tensor_max_diff",
        "checkpoint", "output_dir", "device", "wall_time_s"}``; keys of checks that did not run
        (``train=false``, ``test=false``) are absent.

    Raises:
        CheckFailed: from a callback whose check failed.
    """
    if cfg.paths.output_dir is None:
        raise ValueError(
            "cfg.paths.output_dir is null: set it (the @hydra.main shell uses the Hydra run dir)"
        )
    start = time.perf_counter()
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # In-memory tensors: DataLoader workers would only add process start-up time.
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")

    datamodule, model = build(cfg)
    callbacks = _callbacks(cfg)
    logger = instantiate(cfg.logger) if cfg.get("logger") else False
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=list(callbacks.values()), logger=logger)
    if logger:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))

    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path and str(ckpt_path).endswith(".safetensors"):
        _warm_start(model, ckpt_path)
        ckpt_path = None
    if cfg.get("train", True):
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    if cfg.get("test", True):
        trainer.test(model, datamodule=datamodule, verbose=False)

    metrics: dict[str, Any] = {
        "run_name": cfg.run_name,
        "norm": cfg.norm.name,
        "seed": int(cfg.seed),
        "output_dir": str(output_dir),
        # the device training ran on (the model itself is back on the CPU after teardown)
        "device": str(trainer.strategy.root_device),
    }
    for callback in callbacks.values():
        metrics.update(getattr(callback, "result", {}))
    metrics["wall_time_s"] = round(time.perf_counter() - start, 3)
    (output_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    log.info("metrics: %s", metrics)
    return metrics

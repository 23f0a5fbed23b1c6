"""The run's checks, as Lightning callbacks. Each one raises when its check fails, which fails the
run (and a sweep, with a non-zero exit) instead of leaving a warning in a log.

Each check records what it measured in ``self.result`` for ``train(cfg)`` to return.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import save_file
from torch import nn

import rmsnorm_kernel

from .checkpoint import (
    bitwise_equal,
    build_net,
    load_checkpoint,
    max_abs_diff,
    predict,
    save_checkpoint,
)


class CheckFailed(RuntimeError):
    """A run's check failed: the run must not be reported as a success."""


def _calls() -> tuple[int, int]:
    return rmsnorm_kernel.CALLS["forward"], rmsnorm_kernel.CALLS["backward"]


class KernelCallCounter(L.Callback):
    """Proves which branch trained: the Triton wrapper's ``CALLS`` over the training batches.

    Only what happens between ``on_train_batch_start`` and ``on_train_batch_end`` is counted, so
    validation, test and probe forwards (which also go through the wrapper) never blur the count.
    Each training step must add exactly ``calls_per_step`` forward and backward passes: one per
    kernel RMSNorm in the model for ``norm=triton``, 0 for the others. The expectation comes from
    the ``norm`` config (what was asked), not from inspecting the model (what was built), so a
    branch that silently falls back to PyTorch fails.
    """

    def __init__(self, calls_per_step: int) -> None:
        self.calls_per_step = int(calls_per_step)
        self.result: dict[str, int] = {}
        self._before = (0, 0)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.result = {"forward_calls": 0, "backward_calls": 0, "train_steps": 0}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._before = _calls()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        forward, backward = _calls()
        self.result["forward_calls"] += forward - self._before[0]
        self.result["backward_calls"] += backward - self._before[1]
        self.result["train_steps"] += 1

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        steps = self.result["train_steps"]
        expected = steps * self.calls_per_step
        self.result["expected_calls"] = expected
        got = (self.result["forward_calls"], self.result["backward_calls"])
        if got != (expected, expected):
            raise CheckFailed(
                f"kernel calls over {steps} training steps: forward {got[0]}, backward {got[1]}; "
                f"expected {expected} each ({self.calls_per_step} per step for this norm)"
            )


class InitialProbe(L.Callback):
    """Saves the model's outputs and gradients on the first batch, before any optimizer step.

    The batch is the first ``batch_size`` rows of the train split (unshuffled, so every branch
    probes the same rows); the loss is the training MSE. Writes ``path`` (safetensors) with
    ``output (B, out)``, ``grad.input (B, in)`` and ``grad.<param>`` for every parameter; the
    sweep comparison diffs these files across branches. Gradients are cleared afterwards, so
    training starts exactly as it would without the probe.
    """

    def __init__(self, path: str | Path, batch_size: int) -> None:
        self.path = Path(path)
        self.batch_size = int(batch_size)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step != 0:
            return  # resumed run: "before any step" is long gone
        x, y = (t[: self.batch_size] for t in trainer.datamodule.splits["train"])
        net: nn.Module = pl_module.net
        device = pl_module.device
        x = x.to(device).requires_grad_(True)
        with torch.enable_grad():
            out = net(x)
            nn.functional.mse_loss(out, y.to(device)).backward()
        tensors = {"output": out.detach(), "grad.input": x.grad}
        tensors.update({f"grad.{k}": p.grad for k, p in net.named_parameters()})
        net.zero_grad(set_to_none=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(self.path))


class SafetensorsCheckpoint(L.Callback):
    """At the end of training, exports the net to ``path`` and proves the export reloads exactly.

    A fresh net is built from ``net`` (its Hydra config), loaded from the file, and every tensor
    and the test-set predictions must be bitwise identical to the trained net's (max diff 0).
    """

    def __init__(
        self, path: str | Path, net: DictConfig, metadata: DictConfig | None = None
    ) -> None:
        self.path = Path(path)
        # Resolved to plain containers: the file must describe the net without Hydra's config.
        self.net_config = (
            OmegaConf.to_container(net, resolve=True) if isinstance(net, DictConfig) else dict(net)
        )
        self.metadata = (
            OmegaConf.to_container(metadata, resolve=True)
            if isinstance(metadata, DictConfig)
            else dict(metadata or {})
        )
        self.result: dict[str, Any] = {}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        net: nn.Module = pl_module.net
        test_inputs = trainer.datamodule.splits["test"][0]
        predictions = save_checkpoint(self.path, net, self.net_config, test_inputs, self.metadata)

        fresh = build_net(self.net_config, pl_module.device)
        tensors, _ = load_checkpoint(self.path)  # the same reader `make reload-check` uses
        fresh.load_state_dict({k: tensors[k] for k in fresh.state_dict()}, strict=True)
        trained, reloaded = net.state_dict(), fresh.state_dict()
        if trained.keys() != reloaded.keys():
            raise CheckFailed(f"{self.path}: reloaded keys {sorted(reloaded)} != {sorted(trained)}")
        tensor_diff = max((max_abs_diff(trained[k], reloaded[k]) for k in trained), default=0.0)
        changed = [k for k in trained if not bitwise_equal(trained[k], reloaded[k])]
        fresh_predictions = predict(fresh, test_inputs)
        prediction_diff = max_abs_diff(predictions, fresh_predictions)
        self.result = {
            "checkpoint": str(self.path),
            "reload_tensor_max_diff": tensor_diff,
            "reload_max_diff": prediction_diff,
        }
        if changed or not bitwise_equal(predictions, fresh_predictions):
            raise CheckFailed(
                f"{self.path}: reload is not bitwise identical (tensors changed: {changed}, "
                f"test predictions max abs diff {prediction_diff:.3g})"
            )


class TestMSE(L.Callback):
    """Records ``test/mse`` after testing; fails on a non-finite value or above ``max_mse``."""

    __test__ = False  # a Lightning callback, not a pytest test class

    def __init__(self, max_mse: float | None = None) -> None:
        self.max_mse = max_mse
        self.result: dict[str, float] = {}

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if "test/mse" not in trainer.callback_metrics:
            raise CheckFailed("test/mse was not logged by the test loop")
        mse = float(trainer.callback_metrics["test/mse"])
        self.result = {"test_mse": mse}
        if not math.isfinite(mse):
            raise CheckFailed(f"test/mse is not finite ({mse})")
        if self.max_mse is not None and mse > self.max_mse:
            raise CheckFailed(f"test/mse {mse:.6g} above the configured ceiling {self.max_mse}")

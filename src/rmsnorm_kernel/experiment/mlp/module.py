"""The MLP's LightningModule: MSE regression (logging, DDP reductions: ``core.module``)."""

from __future__ import annotations

import torch
from torch import nn

from ..core.module import TaskModule


class RegressionModule(TaskModule):
    """Trains ``net`` on ``(x (B, in), y (B, out))`` float32 batches with the mean squared error.

    Logs ``train/loss`` at every step, ``val/loss`` at every validation (the exact MSE over the
    whole val split, at its global step) and ``test/mse`` (exact MSE over the test split); see
    :class:`~rmsnorm_kernel.experiment.core.module.TaskModule` for the arguments and DDP.
    """

    test_metric = "test/mse"

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output, targets)

    def error_sum(self, output: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        err = (output - targets).double()
        return err.square().sum(), err.numel()

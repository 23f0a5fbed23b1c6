"""The LightningModule: MSE regression with a partially-built optimizer (Adam by default)."""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import torch
from torch import nn


class RegressionModule(L.LightningModule):
    """Trains ``net`` on ``(x (B, in), y (B, out))`` float32 batches with the mean squared error.

    Logs ``train/loss`` at every step, ``val/loss`` at every validation (the exact MSE over the
    whole val split, at its global step) and ``test/mse`` (exact MSE over the test split).

    Args:
        net: the model (``rmsnorm_kernel.experiment.model.MLP``).
        optimizer: ``optimizer(params=...) -> torch.optim.Optimizer`` (a Hydra ``_partial_``).
    """

    def __init__(self, net: nn.Module, optimizer: Callable[..., torch.optim.Optimizer]) -> None:
        super().__init__()
        # Both stay out of the saved hyperparameters: Hydra's config already records them, and a
        # pickled Hydra partial would make Lightning checkpoints fail `weights_only` loading.
        self.save_hyperparameters(logger=False, ignore=["net", "optimizer"])
        self.net = net
        self.make_optimizer = optimizer
        # Sum of squared errors and element count of the current val/test pass: an exact
        # split-wide MSE whatever the eval batch size (a mean of batch means would weight a short
        # last batch wrongly).
        self._sse = torch.zeros((), dtype=torch.float64)
        self._count = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        # Under DDP each rank holds an equal share of the step's batch: the mean of the ranks'
        # losses (sync_dist) is the loss of the whole batch, the curve one process would log.
        # Without DDP, sync_dist does nothing.
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, sync_dist=True)
        return loss

    def _accumulate(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        x, y = batch
        err = (self.net(x) - y).double()
        self._sse = self._sse.to(err.device) + err.square().sum()
        self._count += err.numel()

    def _flush(self, name: str) -> None:
        # Under DDP each rank saw its own rows of the split: sum the squared errors and counts
        # over ranks (a mean of rank means would weight unequal shares wrongly). Without DDP the
        # strategy's reduce returns its input.
        totals = torch.stack([self._sse, torch.tensor(float(self._count)).to(self._sse)])
        sse, count = self.trainer.strategy.reduce(totals, reduce_op="sum")
        # Logged in float64: branches that differ by float32 roundoff still show a non-zero
        # delta test MSE (TensorBoard itself stores float32). Every rank now holds the same
        # value, so sync_dist's mean returns it (exactly for 2, 4 or 8 ranks: sum then halve).
        mse = sse / count.clamp_min(1)
        self.log(name, mse, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
        self._sse = torch.zeros((), dtype=torch.float64)
        self._count = 0

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._accumulate(batch)

    def on_validation_epoch_end(self) -> None:
        self._flush("val/loss")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._accumulate(batch)

    def on_test_epoch_end(self) -> None:
        self._flush("test/mse")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.make_optimizer(params=self.parameters())

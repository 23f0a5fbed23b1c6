"""The LightningModule base every task shares: one loss, split-wide metrics reduced across ranks.

A task (``mlp.module``, ``lm.module``) says only what its loss is (:meth:`TaskModule.loss`, also
the first-batch probe's) and how a batch adds to the split-wide metric
(:meth:`TaskModule.error_sum`); logging, the DDP reductions and the optimizer live here once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import lightning as L
import torch
from torch import nn

from .settings import check_compile_switches

log = logging.getLogger(__name__)


def _compiled(net: nn.Module, inductor_fusion: bool) -> Callable:
    """``torch.compile(net)``, with the norm-fusion pass in this compile's own options if asked
    (not Inductor's global setting: other compiles in the process stay as they are).

    Dynamo's cache is emptied first: every run of a Hydra multirun builds its net from the same
    class, so all their graphs land in one cache entry list (the class's ``forward``), about
    three per run (train, eval, the last short batch). From the third run Dynamo's recompile
    limit (8) sent later runs back to eager without an error (a compiled sweep on the H200,
    2026-12-01; ``tests/experiment/test_compile_run.py``). Each compiled run now starts from an
    empty cache, so every branch of a sweep compiles alike.
    """
    log.info("model.compile: torch._dynamo.reset(), so this run compiles from an empty cache")
    torch._dynamo.reset()
    options = None
    if inductor_fusion:
        from rmsnorm_kernel.inductor_fusion import RMSNormFusionPass

        options = {"post_grad_custom_post_pass": RMSNormFusionPass()}
    return torch.compile(net, options=options)


class TaskModule(L.LightningModule):
    """Trains ``net`` on ``(inputs, targets)`` batches with :meth:`loss`.

    Logs ``train/loss`` at every step (the mean over every rank's rows under DDP), ``val/loss`` at
    every validation and :attr:`test_metric` after testing: the exact split-wide mean of
    :meth:`error_sum` over every rank's rows, whatever the eval batch size or the number of
    processes.

    Args:
        net: the model, built through the builders' allow-list (``model.net``).
        optimizer: ``optimizer(params=...) -> torch.optim.Optimizer`` (a Hydra ``_partial_``).
        compile: run the training, validation and test steps through ``torch.compile(net)``
            (the net itself, its state_dict keys and the first-batch probe stay eager).
        inductor_fusion: compile with :mod:`rmsnorm_kernel.inductor_fusion`'s pass in this
            compile's options (the residual add and gradient accumulation next to our norm
            folded into its kernels); needs ``compile``.
    """

    #: Name of the split-wide metric logged after testing.
    test_metric = "test/loss"

    def __init__(
        self,
        net: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        compile: bool = False,
        inductor_fusion: bool = False,
    ) -> None:
        check_compile_switches(compile, inductor_fusion)
        super().__init__()
        # Both stay out of the saved hyperparameters: Hydra's config already records them, and a
        # pickled Hydra partial would make Lightning checkpoints fail `weights_only` loading.
        self.save_hyperparameters(logger=False, ignore=["net", "optimizer"])
        self.net = net
        self.make_optimizer = optimizer
        # Kept out of the module tree (a plain attribute, not a submodule): the compiled wrapper
        # shares net's parameters, and registering it would duplicate every state_dict key.
        self.__dict__["_run"] = _compiled(net, inductor_fusion) if compile else net
        # Sum and count of the current val/test pass: an exact split-wide mean whatever the eval
        # batch size (a mean of batch means would weight a short last batch wrongly).
        self._sum = torch.zeros((), dtype=torch.float64)
        self._count = 0

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The training loss of ``net``'s ``output`` (a mean over the batch)."""
        raise NotImplementedError

    def error_sum(self, output: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        """``(float64 sum of the batch's errors, how many terms)``: the split-wide metric is the
        sum over the split divided by the count."""
        raise NotImplementedError

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self._run(inputs)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        inputs, targets = batch
        loss = self.loss(self._run(inputs), targets)
        # Under DDP each rank holds an equal share of the step's batch: the mean of the ranks'
        # losses (sync_dist) is the loss of the whole batch, the curve one process would log.
        # Without DDP, sync_dist does nothing.
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, sync_dist=True)
        return loss

    def _accumulate(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        inputs, targets = batch
        total, count = self.error_sum(self._run(inputs), targets)
        self._sum = self._sum.to(total.device) + total
        self._count += count

    def _flush(self, name: str) -> None:
        # Under DDP each rank saw its own rows of the split: sum the sums and counts over ranks
        # (a mean of rank means would weight unequal shares wrongly). Without DDP the strategy's
        # reduce returns its input.
        totals = torch.stack([self._sum, torch.tensor(float(self._count)).to(self._sum)])
        total, count = self.trainer.strategy.reduce(totals, reduce_op="sum")
        # Logged in float64: branches that differ by float32 roundoff still show a non-zero
        # delta (TensorBoard itself stores float32). Every rank now holds the same value, so
        # sync_dist's mean returns it (exactly for 2, 4 or 8 ranks: sum then halve).
        mean = total / count.clamp_min(1)
        self.log(name, mean, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
        self._sum = torch.zeros((), dtype=torch.float64)
        self._count = 0

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._accumulate(batch)

    def on_validation_epoch_end(self) -> None:
        self._flush("val/loss")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._accumulate(batch)

    def on_test_epoch_end(self) -> None:
        self._flush(self.test_metric)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.make_optimizer(params=self.parameters())

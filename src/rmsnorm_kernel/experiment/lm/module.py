"""The language model's LightningModule: next-token cross-entropy (logging, DDP reductions:
``core.module``)."""

from __future__ import annotations

import torch
from torch import nn

from ..core.module import TaskModule


class LanguageModelModule(TaskModule):
    """Next-token cross-entropy on ``(inputs (B, S) int64, targets (B, S) int64)`` batches.

    Logs ``train/loss`` at every step, and ``val/loss`` / ``test/loss``: the exact mean
    cross-entropy per token over the whole split (float64 sums, so it depends neither on the eval
    batch size nor on the number of processes). Logits are upcast to float32 before the loss
    (under ``bf16-mixed`` the LM head's output is bfloat16). See
    :class:`~rmsnorm_kernel.experiment.core.module.TaskModule` for the arguments (``net``: a
    :class:`~rmsnorm_kernel.experiment.lm.net.CausalLM`).
    """

    test_metric = "test/loss"

    @staticmethod
    def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean"):
        """``logits (B, S, V)``, ``targets (B, S)`` -> cross-entropy in float32."""
        return nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction
        )

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.cross_entropy(output, targets)

    def error_sum(self, output: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        return self.cross_entropy(output, targets, reduction="sum").double(), targets.numel()

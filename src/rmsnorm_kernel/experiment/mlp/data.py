"""The synthetic regression task and its LightningDataModule.

``make_splits`` is the single definition of the data: a random "teacher" MLP drawn from the
dataset seed maps Gaussian inputs to targets, plus Gaussian noise. Everything is drawn in float64
on the CPU from one ``torch.Generator`` and only then rounded to float32, so the splits are
bitwise identical across runs, branches and machines that share the config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ..core.data import SPLITS, SplitsDataModule


def make_splits(dataset_cfg: Mapping[str, Any]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Build the train/val/test splits of the task described by ``dataset_cfg``.

    Args:
        dataset_cfg: a mapping (DictConfig or dict) with ``in_features``, ``out_features``,
            ``teacher_hidden``, ``noise``, ``n_train``, ``n_val``, ``n_test`` and ``seed``; other
            keys are ignored.

    Returns:
        ``{"train" | "val" | "test": (inputs (n, in_features) float32,
        targets (n, out_features) float32)}``, deterministic in ``dataset_cfg``.
    """
    d_in, d_out = int(dataset_cfg["in_features"]), int(dataset_cfg["out_features"])
    hidden = int(dataset_cfg["teacher_hidden"])
    noise = float(dataset_cfg["noise"])
    g = torch.Generator().manual_seed(int(dataset_cfg["seed"]))
    f64 = torch.float64
    # Scaled so pre-activations and targets are O(1): w1 (in, hidden), w2 (hidden, out).
    w1 = torch.randn(d_in, hidden, generator=g, dtype=f64) / math.sqrt(d_in)
    w2 = torch.randn(hidden, d_out, generator=g, dtype=f64) / math.sqrt(hidden)
    splits = {}
    for name in SPLITS:  # fixed order: each split's draws follow the previous split's
        n = int(dataset_cfg[f"n_{name}"])
        x = torch.randn(n, d_in, generator=g, dtype=f64)  # (n, in)
        y = torch.tanh(x @ w1) @ w2  # (n, in) -> (n, hidden) -> (n, out)
        y = y + noise * torch.randn(n, d_out, generator=g, dtype=f64)
        splits[name] = (x.float(), y.float())
    return splits


class SyntheticDataModule(SplitsDataModule):
    """Serves :func:`make_splits` as ``(x (B, in) float32, y (B, out) float32)`` batches (see
    :class:`~rmsnorm_kernel.experiment.core.data.SplitsDataModule` for the batch order, resume,
    DDP and ``**splits``: sizes, data seed, batch sizes, shuffle seed)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        teacher_hidden: int,
        noise: float,
        **splits: Any,
    ) -> None:
        super().__init__(**splits)

    def make_splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        return make_splits(self.hparams)

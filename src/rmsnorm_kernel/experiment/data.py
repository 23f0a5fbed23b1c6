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

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

SPLITS = ("train", "val", "test")


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


class SyntheticDataModule(L.LightningDataModule):
    """Serves :func:`make_splits` as ``(x (B, in) float32, y (B, out) float32)`` batches.

    Training batches are shuffled by a generator seeded with ``shuffle_seed`` (the run seed), so
    every branch of a sweep sees the same batches in the same order, and ``drop_last`` keeps every
    step at exactly ``batch_size`` examples. Val and test are served unshuffled.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        teacher_hidden: int,
        noise: float,
        n_train: int,
        n_val: int,
        n_test: int,
        seed: int,
        batch_size: int = 32,
        eval_batch_size: int = 256,
        shuffle_seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.splits: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    def setup(self, stage: str | None = None) -> None:
        # All splits at once, whatever the stage: they are small, and callbacks need the test
        # split at the end of training.
        if self.splits is None:
            self.splits = make_splits(self.hparams)

    def _loader(self, split: str, batch_size: int, shuffle: bool) -> DataLoader:
        self.setup()
        generator = torch.Generator().manual_seed(self.hparams.shuffle_seed) if shuffle else None
        return DataLoader(
            TensorDataset(*self.splits[split]),
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=shuffle,
            generator=generator,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.hparams.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.hparams.eval_batch_size, shuffle=False)

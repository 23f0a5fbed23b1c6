"""The synthetic regression task and its LightningDataModule.

``make_splits`` is the single definition of the data: a random "teacher" MLP drawn from the
dataset seed maps Gaussian inputs to targets, plus Gaussian noise. Everything is drawn in float64
on the CPU from one ``torch.Generator`` and only then rounded to float32, so the splits are
bitwise identical across runs, branches and machines that share the config.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
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


class ResumableBatches:
    """Shuffled training batches, epoch after epoch, that resume mid-epoch bit for bit.

    Each epoch draws from one generator seeded with ``shuffle_seed`` what
    ``DataLoader(shuffle=True, generator=..., drop_last=True)`` draws when Lightning iterates it
    (a base seed for its iterator, then ``torch.randperm(n)``; Lightning stops at ``len`` batches,
    so ``RandomSampler`` never computes its trailing empty slice), so the batches are the ones the
    plain shuffled loader served before, and earlier results still hold.

    Under DDP (``num_replicas`` processes) every rank draws the same order and takes its share
    of each step's ``batch_size * num_replicas`` rows: rank ``r`` gets rows ``r * batch_size`` to
    ``(r + 1) * batch_size`` of the step's slice. The ranks' batches together are exactly the
    batch one process with ``batch_size * num_replicas`` draws at that step, so 2 processes x 16
    train on the same examples as 1 x 32. ``num_replicas`` and ``rank`` default to the default
    process group's (1 and 0 without one), as ``DistributedSampler``'s do.

    Lightning saves :meth:`state_dict` in its checkpoints (it does so for any train loader with
    ``state_dict``/``load_state_dict``) and restores it on resume: the generator state at the
    start of the current epoch plus the number of batches already trained in it, counted as
    optimizer steps since the epoch began (``steps_done()``, the trainer's ``global_step``; one
    batch per step). Counting steps rather than batches handed out matters: Lightning fetches one
    batch ahead, so the loader has always served one more batch than was trained.
    """

    def __init__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        batch_size: int,
        shuffle_seed: int,
        steps_done: Callable[[], int] = lambda: 0,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        self.x, self.y = x, y
        self.batch_size = int(batch_size)
        default_replicas, default_rank = process_group()
        self.num_replicas = default_replicas if num_replicas is None else int(num_replicas)
        self.rank = default_rank if rank is None else int(rank)
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank must be in [0, {self.num_replicas}) (got {self.rank})")
        if len(self) == 0:
            raise ValueError(
                f"{len(x)} training rows make no step of batch_size {self.batch_size} x "
                f"{self.num_replicas} processes"
            )
        self.generator = torch.Generator().manual_seed(int(shuffle_seed))
        self.steps_done = steps_done
        self._epoch_rng_state = self.generator.get_state()
        self._epoch_start_step = 0
        self._skip = 0  # batches of the current epoch already trained (set by load_state_dict)

    def __len__(self) -> int:
        return len(self.x) // (self.batch_size * self.num_replicas)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.x)
        step_rows = self.batch_size * self.num_replicas  # the step's batch over all ranks
        mine = slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
        self._epoch_rng_state = self.generator.get_state()
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)  # the iterator's seed
        order = torch.randperm(n, generator=self.generator)  # (n,) this epoch's order
        skip, self._skip = self._skip, 0
        self._epoch_start_step = self.steps_done() - skip
        for b in range(skip, len(self)):
            idx = order[b * step_rows : (b + 1) * step_rows][mine]
            yield self.x[idx], self.y[idx]

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch_rng_state": self._epoch_rng_state.clone(),
            "batches_done": self.steps_done() - self._epoch_start_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["epoch_rng_state"])
        self._skip = int(state["batches_done"])
        if not 0 <= self._skip <= len(self):
            raise ValueError(
                f"batches_done must be in [0, {len(self)}] (got {self._skip}): the checkpoint "
                "was made with another batch size or split size"
            )


def process_group() -> tuple[int, int]:
    """``(world size, rank)`` of the default process group; ``(1, 0)`` without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


def eval_loader(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> DataLoader:
    """Unshuffled ``(x, y)`` batches; under DDP this rank's rows only (``rank::world``), each
    row on exactly one rank, none repeated.

    Lightning's own distributed sampler would pad the split to a multiple of the world size,
    counting some rows twice in a split-wide metric; it leaves a loader alone whose sampler is
    already distributed, as this one is.
    """
    dataset = TensorDataset(x, y)
    world, rank = process_group()
    if world == 1:
        return DataLoader(dataset, batch_size=batch_size)
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

    sampler = UnrepeatedDistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


class SplitsDataModule(L.LightningDataModule):
    """Serves in-memory ``{"train", "val", "test"}`` splits of ``(inputs, targets)`` tensors.

    Subclasses say how the splits are made (:meth:`make_splits`). Training batches come from
    :class:`ResumableBatches`, shuffled by ``hparams.shuffle_seed`` (the run seed), so every branch
    of a sweep sees the same batches in the same order, every step has exactly ``batch_size``
    examples, and a run resumed from a Lightning checkpoint continues with the batch it stopped
    before. Val and test are served unshuffled. Under DDP ``batch_size`` is per process (the step
    trains on ``batch_size x processes`` rows) and each process evaluates its own share of val and
    test (:func:`eval_loader`).
    """

    splits: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    def make_splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        # All splits at once, whatever the stage: they are small, and callbacks need the test
        # split at the end of training.
        if self.splits is None:
            self.splits = self.make_splits()

    def _global_step(self) -> int:
        return self.trainer.global_step if self.trainer is not None else 0

    def train_dataloader(self) -> ResumableBatches:
        self.setup()
        x, y = self.splits["train"]
        return ResumableBatches(
            x, y, self.hparams.batch_size, self.hparams.shuffle_seed, self._global_step
        )

    def _eval_loader(self, split: str) -> DataLoader:
        self.setup()
        return eval_loader(*self.splits[split], self.hparams.eval_batch_size)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")


class SyntheticDataModule(SplitsDataModule):
    """Serves :func:`make_splits` as ``(x (B, in) float32, y (B, out) float32)`` batches (see
    :class:`SplitsDataModule` for the batch order, resume and DDP)."""

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

    def make_splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        return make_splits(self.hparams)

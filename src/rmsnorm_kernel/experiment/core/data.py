"""The data module base every task shares: in-memory splits, resumable batches, DDP shares.

A task (``mlp.data``, ``lm.data``) only says how its ``{"train", "val", "test"}`` splits of
``(inputs, targets)`` tensors are made (:meth:`SplitsDataModule.make_splits`); the batch order,
exact resume mid-epoch and each DDP rank's share of every step and of val/test live here once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

SPLITS = ("train", "val", "test")


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

    A task's constructor takes its own arguments and passes the ones below on (``**splits``);
    every argument becomes ``hparams``.

    Args:
        n_train, n_val, n_test: rows of each split.
        seed: the data seed (the task's draws), independent of the run seed.
        batch_size: training rows per step and process.
        eval_batch_size: rows per val/test batch.
        shuffle_seed: the batch order's seed (the run seed in the configs).
    """

    splits: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    def __init__(
        self,
        n_train: int,
        n_val: int,
        n_test: int,
        seed: int,
        batch_size: int,
        eval_batch_size: int,
        shuffle_seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)

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

"""The synthetic task: shapes, dtypes, determinism; the datamodule's batches."""

from __future__ import annotations

import lightning as L
import torch
from experiment_helpers import compose_cfg
from hydra.utils import instantiate
from torch.utils.data import DataLoader, TensorDataset

from rmsnorm_kernel.experiment.core.run import build
from rmsnorm_kernel.experiment.mlp.data import SyntheticDataModule, make_splits


def test_make_splits_shapes_dtypes_and_determinism():
    cfg = compose_cfg().dataset
    a, b = make_splits(cfg), make_splits(dict(cfg))  # DictConfig or plain mapping
    assert set(a) == {"train", "val", "test"}
    for name, n in (("train", 256), ("val", 64), ("test", 64)):
        x, y = a[name]
        assert x.shape == (n, 16) and y.shape == (n, 4)
        assert x.dtype == y.dtype == torch.float32
        assert torch.equal(x, b[name][0]) and torch.equal(y, b[name][1])
    assert not torch.equal(a["train"][0][:64], a["test"][0])  # splits are distinct draws


def test_data_seed_changes_the_task():
    cfg = compose_cfg().dataset
    other = make_splits({**cfg, "seed": cfg.seed + 1})
    assert not torch.equal(make_splits(cfg)["test"][1], other["test"][1])


def test_noise_is_the_floor_of_the_task():
    cfg = compose_cfg(["dataset.noise=0.0"]).dataset
    x, y = make_splits(cfg)["train"]
    assert torch.isfinite(y).all() and 0.05 < y.var().item() < 5  # O(1) targets


def test_datamodule_batches_are_full_and_reproducible():
    cfg = compose_cfg()
    first = [next(iter(instantiate(cfg.dataset).train_dataloader())) for _ in range(2)]
    x, y = first[0]
    assert x.shape == (32, 16) and y.shape == (32, 4)
    assert torch.equal(first[0][0], first[1][0])  # same shuffle seed -> same first batch
    dm = instantiate(cfg.dataset)
    assert len(dm.train_dataloader()) == 256 // 32
    ((xt, _),) = list(dm.test_dataloader())
    assert torch.equal(xt, make_splits(cfg.dataset)["test"][0])  # test served unshuffled


class _Batches(L.Callback):
    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.append(batch[0].clone())


class _PlainShuffled(SyntheticDataModule):
    """The loader the datamodule replaced: a shuffled DataLoader with a seeded generator."""

    def train_dataloader(self) -> DataLoader:
        self.setup()
        generator = torch.Generator().manual_seed(self.hparams.shuffle_seed)
        dataset = TensorDataset(*self.splits["train"])
        return DataLoader(
            dataset, self.hparams.batch_size, True, generator=generator, drop_last=True
        )


def _batches_under_lightning(datamodule, steps: int) -> list[torch.Tensor]:
    cfg = compose_cfg(["norm=torch"])
    model = build(cfg)[1]
    record = _Batches()
    trainer = instantiate(
        cfg.trainer, max_steps=steps, callbacks=[record], logger=False, enable_checkpointing=False
    )
    trainer.fit(model, datamodule=datamodule)
    return record.seen


def test_resumable_batches_are_those_of_a_plain_shuffled_loader():
    # Results recorded before the resumable loader existed stay reproducible.
    cfg = compose_cfg().dataset
    kwargs = {k: v for k, v in cfg.items() if k != "_target_"}
    steps = 8 * 2 + 3  # into the third epoch
    ours = _batches_under_lightning(SyntheticDataModule(**kwargs), steps)
    plain = _batches_under_lightning(_PlainShuffled(**kwargs), steps)
    assert len(ours) == len(plain) == steps
    assert all(torch.equal(a, b) for a, b in zip(ours, plain, strict=True))

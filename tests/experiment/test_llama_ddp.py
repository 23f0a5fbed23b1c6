"""``experiment=llama`` under ``trainer=ddp`` on CPU (gloo, 2 processes): 2 x batch 2 trains like
1 x batch 4, as the MLP does (test_ddp.py): the same test/loss and train/loss curve.

The LightningModule base (``core.module.TaskModule``) reduces the loss across ranks; before the
LM shared it, each rank logged its own half (measured: test/loss 4.0990 under DDP against 4.0028
in one process). The hf branch (no Triton kernel) keeps it cheap.
"""

from __future__ import annotations

import pytest
from experiment_helpers import compose_cfg, one_thread
from tbparse import SummaryReader

from rmsnorm_kernel.experiment.core.run import train

STEPS = 4
COMMON = (
    "experiment=llama",
    "norm=hf",
    f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=2",
    # 15 test sequences: the ranks hold 8 and 7, so a mean of the ranks' means would be wrong.
    "dataset.n_test=15",
    # Plain SGD: its step is proportional to the gradient, so a sum across ranks where an average
    # belongs would show; Adam divides the scale out and would hide it.
    "model.optimizer._target_=torch.optim.SGD",
    "model.optimizer.lr=0.5",
    "callbacks.throughput.warmup_steps=1",
    "callbacks.progress_bar=null",
    "+trainer.enable_progress_bar=false",
)
DDP = ("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "dataset.batch_size=2")


def _curve(metrics: dict, tag: str) -> dict[int, float]:
    frame = SummaryReader(metrics["log_dir"]).scalars
    rows = frame[frame.tag == tag]
    return dict(zip(rows.step.tolist(), rows.value.tolist(), strict=True))


def test_two_processes_of_2_give_the_test_loss_of_one_of_4(tmp_path):
    cfg = compose_cfg([*COMMON, "dataset.batch_size=4"], tmp_path / "one", small=False)
    tolerances = cfg.compare.equivalence  # conf/compare/default.yaml: float32 reordering only
    with one_thread():
        one = train(cfg)
        ddp = train(compose_cfg([*COMMON, *DDP], tmp_path / "ddp", small=False))
    assert (ddp["world_size"], one["world_size"]) == (2, 1)
    assert ddp["train_steps"] == one["train_steps"] == STEPS
    assert ddp["test/loss"] == pytest.approx(one["test/loss"], abs=tolerances.metric_abs, rel=0)
    train_ddp, train_one = _curve(ddp, "train/loss"), _curve(one, "train/loss")
    assert sorted(train_ddp) == sorted(train_one) == list(range(STEPS))
    deltas = [abs(train_ddp[s] - train_one[s]) for s in train_one]
    assert max(deltas) <= tolerances.curve_max_abs, deltas

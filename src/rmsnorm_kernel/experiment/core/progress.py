"""The run's progress bar: optimizer steps against the step budget, across epochs.

Lightning's ``RichProgressBar`` counts batches per epoch and titles the bar
``Epoch e/max_epochs-1``, which reads ``Epoch 3/-2`` when the step budget alone ends training
(``max_epochs: -1``), and its speed column prints ``0.00it/s`` for one-batch loops (the speed
needs two samples). This subclass keeps one training bar for the whole run, counting
``global_step`` up to ``max_steps`` (a resumed run starts at the step it resumed from), and
leaves the speed blank until it is known.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress.rich_progress import ProcessingSpeedColumn
from rich.text import Text


class _SpeedColumn(ProcessingSpeedColumn):
    def render(self, task) -> Text:
        return Text("" if task.speed is None else f"{task.speed:>.2f}it/s", style=self.style)


def step_budget(trainer: L.Trainer) -> int | float:
    """The number of optimizer steps this run may take (``inf`` when unbounded)."""
    if trainer.max_steps is not None and trainer.max_steps > 0:
        return trainer.max_steps
    epochs = trainer.max_epochs
    if epochs is None or epochs < 0 or trainer.num_training_batches == float("inf"):
        return float("inf")
    return epochs * trainer.num_training_batches // max(trainer.accumulate_grad_batches, 1)


class StepProgressBar(RichProgressBar):
    """``RichProgressBar`` whose training bar shows ``steps done/step budget`` for the whole run."""

    def _get_train_description(self, current_epoch: int) -> str:
        return f"Training (epoch {current_epoch})"

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.is_disabled or self.progress is None:
            return
        description = self._get_train_description(trainer.current_epoch)
        if self.train_progress_bar_id is None:
            self.train_progress_bar_id = self._add_task(step_budget(trainer), description)
        self.progress.update(
            self.train_progress_bar_id,
            description=description,
            completed=trainer.global_step,
            visible=True,
        )
        self.refresh()

    def _initialize_train_progress_bar_id(self) -> None:
        self.train_progress_bar_id = self._add_task(
            step_budget(self.trainer), self._get_train_description(self.trainer.current_epoch)
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.is_disabled and self.train_progress_bar_id is None:
            self._initialize_train_progress_bar_id()
        self._update(self.train_progress_bar_id, trainer.global_step)
        self._update_metrics(trainer, pl_module)
        self.refresh()

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict:
        # The logger's version is the run label (`norm=triton,seed=0`), cut to a few characters
        # in the bar's metric column; the label is in the log dir's name instead.
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items

    def configure_columns(self, trainer: L.Trainer) -> list:
        columns = super().configure_columns(trainer)
        return [
            _SpeedColumn(style=self.theme.processing_speed)
            if isinstance(c, ProcessingSpeedColumn)
            else c
            for c in columns
        ]

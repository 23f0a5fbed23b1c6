"""Helpers of the experiment tests: configs from the compose API, sized for the interpreter.

Every run writes under pytest's tmp dirs (never the repo's outputs/ or checkpoints/). A module
of its own (unique name: test dirs are not packages) so test files can import it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from rmsnorm_kernel.experiment.core.run import train
from rmsnorm_kernel.paths import config_dir

#: The config overlay that sizes the MLP for the interpreter (conf/debug/cpu_small.yaml): a
#: 100-step Triton run takes seconds, not minutes.
SMALL = "debug=cpu_small"


def compose_cfg(
    overrides: Sequence[str] = (),
    out_dir: Path | None = None,
    small: bool = True,
    return_hydra_config: bool = False,
) -> DictConfig:
    """``conf/train.yaml`` + ``overrides``; outputs and checkpoints under ``out_dir``."""
    paths = []
    if out_dir is not None:
        paths = [f"paths.output_dir={out_dir / 'run'}", f"paths.checkpoint_dir={out_dir / 'ckpt'}"]
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose(
            "train",
            overrides=[*([SMALL] if small else []), *paths, *overrides],
            return_hydra_config=return_hydra_config,
        )


def tiny_llama(root: Path, run: str, steps: int) -> list[str]:
    """Overrides of a short ``experiment=llama`` run: ``steps`` steps, one validation, no
    progress bar, run dir ``root/run``, checkpoints in ``root/checkpoints``."""
    return [
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps}",
        "callbacks.throughput.warmup_steps=1",
        "~callbacks.progress_bar",
        "+trainer.enable_progress_bar=false",
        f"paths.output_dir={root / run}",
        f"paths.checkpoint_dir={root / 'checkpoints'}",
    ]


#: Environment of subprocess runs: one intra-op thread (see ``one_thread``).
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def train_command(*overrides: str, multirun: bool = False, small: bool = True) -> list[str]:
    """``python -m rmsnorm_kernel.train [--multirun] debug=cpu_small *overrides``: the main job
    as a user runs it (run it with ``env=ENV``)."""
    return [
        sys.executable,
        "-m",
        "rmsnorm_kernel.train",
        *(["--multirun"] if multirun else []),
        *([SMALL] if small else []),
        *overrides,
    ]


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread. The nets here are tiny, and on a shared 2-core machine
    two threads spend most of a step waiting for each other (300 steps: 27 s vs 4.7 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run(out_dir: Path, *overrides: str) -> dict:
    """``train(cfg)`` of a small config writing under ``out_dir``, on one thread."""
    with one_thread():
        return train(compose_cfg(overrides, out_dir))


class SignalAt(L.Callback):
    """Sends ``signum`` to this process from Lightning hook ``hook`` when ``trainer.global_step``
    is ``step``: a stop request landing at a chosen point of a step (during the optimizer step,
    after it, during validation...), as it may on a fast GPU, instead of wherever a timer lands.
    Built from the config: ``+callbacks.signal._target_=experiment_helpers.SignalAt``."""

    def __init__(self, hook: str, step: int, signum: int = int(signal.SIGTERM)) -> None:
        self.step, self.signum, self.sent = int(step), int(signum), False

        def fire(trainer: L.Trainer, *args) -> None:
            if not self.sent and trainer.global_step == self.step:
                self.sent = True
                os.kill(os.getpid(), self.signum)

        setattr(self, hook, fire)


class DamagedIndex(L.Callback):
    """Writes ``text`` into ``path`` (the checkpoint dir's index.json) once training starts: the
    index passed the pre-fit check and is unreadable by the time the export adds to it."""

    def __init__(self, path: str, text: str = "") -> None:
        self.path, self.text = Path(path), text

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(self.text)


class FileInTheWay(L.Callback):
    """Puts a file where ``path`` (the checkpoint dir) should be once training starts: the dir
    passed the pre-fit check and is unusable by the time the export is written."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("not a directory\n")

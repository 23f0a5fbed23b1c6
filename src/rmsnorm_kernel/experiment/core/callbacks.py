"""The run's checks, as Lightning callbacks. Each one raises when its check fails, which fails the
run (and a sweep, with a non-zero exit) instead of leaving a warning in a log.

Each check records what it measured in ``self.result``; ``train(cfg)`` merges these into
``metrics.json``, and the sweep comparison trusts them instead of measuring again.
"""

from __future__ import annotations

import math
import os
import signal
import threading
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

import rmsnorm_kernel

from ..exports import index
from ..exports.checkpoint import (
    CheckpointError,
    make_metadata,
    publish,
    sha256_of,
    unique_path,
    verify_checkpoint,
    write_checkpoint,
)
from .builders import spec_of


class CheckFailed(RuntimeError):
    """A run's check failed: the run must not be reported as a success."""


class ExportFailed(CheckFailed):
    """The trained net could not be written to the checkpoint dir (a file in the way, read-only,
    disk full). Training is not lost: ``last.ckpt`` is saved (:class:`SaveOnInterrupt`) and
    ``train(cfg)`` still writes ``metrics.json`` (with ``export_error``) before raising."""


def _calls() -> tuple[int, int]:
    return rmsnorm_kernel.CALLS["forward"], rmsnorm_kernel.CALLS["backward"]


class KernelCallCounter(L.Callback):
    """Proves which branch trained: the Triton wrapper's ``CALLS`` over the training batches.

    Only what happens between ``on_train_batch_start`` and ``on_train_batch_end`` is counted, so
    validation, test and probe forwards (which also go through the wrapper) never blur the count.
    Each training step of this process must add exactly ``calls_per_step`` forward and backward
    passes: one per kernel RMSNorm in the model for ``norm=triton``, 0 for the others. The
    expectation comes from the ``norm`` config (what was asked), not from inspecting the model
    (what was built), so a branch that silently falls back to PyTorch fails.

    ``result``: ``forward_calls``, ``backward_calls``, ``expected_calls`` and ``session_steps``
    (steps run by this process) and ``train_steps`` (the run's total, resumed steps included).
    """

    def __init__(self, calls_per_step: int) -> None:
        self.calls_per_step = int(calls_per_step)
        self.result: dict[str, int] = {}
        self._before = (0, 0)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.result = {"forward_calls": 0, "backward_calls": 0, "session_steps": 0}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._before = _calls()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        forward, backward = _calls()
        self.result["forward_calls"] += forward - self._before[0]
        self.result["backward_calls"] += backward - self._before[1]
        self.result["session_steps"] += 1

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        steps = self.result["session_steps"]
        expected = steps * self.calls_per_step
        self.result["expected_calls"] = expected
        self.result["train_steps"] = trainer.global_step
        # Under DDP each process counts its own calls (CALLS is per process). Every rank gathers
        # every rank's counts and checks them all, so a failure raises in all ranks together
        # instead of leaving the others waiting in the next collective.
        counts = [(self.result["forward_calls"], self.result["backward_calls"], steps)]
        if trainer.world_size > 1:
            gathered: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(gathered, counts[0])
            counts = [tuple(c) for c in gathered]
            self.result["forward_calls_per_rank"] = [c[0] for c in counts]
            self.result["backward_calls_per_rank"] = [c[1] for c in counts]
        for rank, (forward, backward, rank_steps) in enumerate(counts):
            want = rank_steps * self.calls_per_step
            if (forward, backward, rank_steps) != (want, want, steps):
                where = f"rank {rank}: " if len(counts) > 1 else ""
                raise CheckFailed(
                    f"{where}kernel calls over {rank_steps} training steps: forward {forward}, "
                    f"backward {backward}; expected {expected} each ({self.calls_per_step} per "
                    f"step for this norm, {steps} steps)"
                )


class SafetensorsCheckpoint(L.Callback):
    """At the end of training, exports the net under a name no other run uses; proves it reloads.

    The file is ``directory/<stem>.safetensors`` (``stem`` carries the run name and the config
    hash), or ``<stem>.v2.safetensors``, ``.v3``... when an identical config ran before: an
    earlier export is never replaced. It is written beside its final name first and renamed in
    under the index lock, then recorded in ``directory/index.json`` with its sha256. The export is
    then checked by :func:`~.checkpoint.verify_checkpoint`, the same function ``reload`` uses,
    against the trained net: every tensor and the test predictions bitwise identical.

    The file's metadata is built (and checked) when the callback is built, so a config whose
    export could not be reloaded fails before training.
    """

    def __init__(
        self,
        directory: str | Path,
        stem: str,
        net: DictConfig | dict,
        norm: str,
        seed: int,
        config_hash: str,
        run_dir: str | Path,
    ) -> None:
        self.directory = Path(directory)
        self.stem = str(stem)
        net_config = (
            OmegaConf.to_container(net, resolve=True) if isinstance(net, DictConfig) else net
        )
        self.metadata = make_metadata(spec_of(net_config), norm, seed, config_hash, "cpu")
        self.run_dir = str(run_dir)
        self.result: dict[str, Any] = {}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Under DDP every rank holds the same weights: global rank 0 alone writes the file and
        # the index, then tells every rank whether the export passed, so all fail together.
        error: Exception | None = None
        if trainer.is_global_zero:
            try:
                self._export(trainer, pl_module)
            except Exception as e:
                error = e
        if trainer.world_size > 1:
            said = None if error is None else f"{type(error).__name__}: {error}"
            said = trainer.strategy.broadcast(said, src=0)
            if error is None and said is not None:
                raise ExportFailed(f"the export on rank 0 failed: {said}")
        if error is not None:
            raise error

    def _export(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        net: nn.Module = pl_module.net
        test_inputs = trainer.datamodule.splits["test"][0]
        kept = (
            "the trained state is kept in last.ckpt"
            if trainer.checkpoint_callback is not None
            else "checkpointing is off (trainer.enable_checkpointing=false): no last.ckpt"
        )
        diverged = [k for k, v in net.state_dict().items() if not bool(torch.isfinite(v).all())]
        if diverged:  # (a NaN net reloads "bit for bit" too: it must not be listed as a result)
            raise ExportFailed(
                f"the trained net holds NaN or inf (the run diverged) in {diverged[:3]}: nothing "
                f"exported to {self.directory}; {kept}"
            )
        tmp = self.directory / f".{self.stem}.{os.getpid()}.tmp"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_checkpoint(tmp, net, test_inputs, self.metadata)
        except OSError as e:
            if tmp.parent.is_dir():
                tmp.unlink(missing_ok=True)
            raise ExportFailed(
                f"paths.checkpoint_dir {self.directory}: the export could not be written "
                f"({e.strerror or e}); {kept}"
            ) from e
        digest = sha256_of(tmp)
        try:
            with index.locked(self.directory):
                # (a name index.json lists stays taken after its file is deleted: a new name then)
                path = unique_path(self.directory, self.stem, index.read_index(self.directory))
                publish(tmp, path)
                try:
                    index.add_entry(
                        self.directory,
                        path.name,
                        {
                            "run_dir": self.run_dir,
                            "config_hash": self.metadata["config_hash"],
                            "sha256": digest,
                            "norm": self.metadata["norm"],
                            "seed": int(self.metadata["seed"]),
                        },
                    )
                except BaseException:
                    path.unlink(missing_ok=True)  # not listed in the index: not kept either
                    raise
        except index.IndexFileError as e:  # e.g. index.json damaged since the run started
            tmp.unlink(missing_ok=True)
            raise ExportFailed(f"{e}: nothing exported; {kept}") from e
        try:
            checked = verify_checkpoint(
                path, device=str(pl_module.device), sha256=digest, trained=net
            )
        except CheckpointError as e:
            raise CheckFailed(f"export does not reload exactly: {e}") from e
        self.result = {
            "checkpoint": str(path),
            "checkpoint_sha256": digest,
            "reload_tensor_max_diff": checked["reload_tensor_max_diff"],
            "reload_max_diff": checked["reload_max_diff"],
        }


class TestMetric(L.Callback):
    """Records the test metric (``metric``, e.g. ``test/mse``) after testing.

    Fails on a non-finite value or one above ``max_value``. ``result``: ``{metric: value}``, the
    figure the sweep comparison reads from ``metrics.json``.
    """

    __test__ = False  # a Lightning callback, not a pytest test class

    def __init__(self, metric: str = "test/mse", max_value: float | None = None) -> None:
        self.metric = str(metric)
        self.max_value = max_value
        self.result: dict[str, float] = {}

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.metric not in trainer.callback_metrics:
            raise CheckFailed(
                f"{self.metric} was not logged by the test loop "
                f"(logged: {sorted(trainer.callback_metrics)})"
            )
        value = float(trainer.callback_metrics[self.metric])
        self.result = {self.metric: value}
        if not math.isfinite(value):
            raise CheckFailed(f"{self.metric} is not finite ({value})")
        if self.max_value is not None and value > self.max_value:
            raise CheckFailed(
                f"{self.metric} {value:.6g} above the configured ceiling {self.max_value}"
            )


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class RecordRunIdentity(L.Callback):
    """Every Lightning checkpoint of the run (``last.ckpt``, interrupt or not) records the run's
    branch and config (:func:`~.identity.run_identity`) under ``CHECKPOINT_KEY``, so a run refuses
    to resume from another branch's or config's checkpoint (:func:`~.identity.check_resume`).
    ``train(cfg)`` adds it to every run, whatever ``cfg.callbacks`` holds."""

    def __init__(self, identity: dict[str, Any]) -> None:
        self.identity = identity

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        from .identity import CHECKPOINT_KEY

        checkpoint[CHECKPOINT_KEY] = self.identity


class SaveOnInterrupt(L.Callback):
    """Ctrl-C or SIGTERM during fit: finish the step, save ``dirpath/last.ckpt``, say how to resume.

    Lightning's SIGTERM handler lets the current step finish and then raises ``SIGTERMException``,
    so the saved state (weights, optimizer, loops, train batches) is consistent and resumes
    exactly. A Ctrl-C arriving mid-step would leave half-updated weights, so during fit the first
    Ctrl-C is turned into that same graceful stop; a second Ctrl-C stops at once, without saving.
    ``train(cfg)`` then exits 130 (Ctrl-C) or 143 (SIGTERM).

    Resumed, the curves continue step for step. Lightning logs a step's ``train/loss`` at its
    counter ``_batches_that_stepped``, which in a run that never stopped equals ``global_step`` at
    the start of every batch; on resume Lightning re-derives that counter from where in the step
    the checkpoint was saved, and a stop after a step that ran validation came back one ahead
    (every later point logged one step late: seen on the H200, whose first validation is slow
    enough to catch the signal). So at the first training batch of every fit the counter is set
    back to ``global_step`` (a no-op in a fresh run). Optimizer steps and weights are untouched.
    """

    def __init__(self, dirpath: str | Path) -> None:
        self.path = Path(dirpath) / "last.ckpt"
        self.stopped_by_ctrl_c = False
        self._previous: Any = None
        self._align_log_step = False

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._align_log_step = True
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        self._previous = signal.getsignal(signal.SIGINT)

        def ctrl_c(signum, frame) -> None:
            self.stopped_by_ctrl_c = True
            signal.signal(signal.SIGINT, self._previous)  # a second Ctrl-C stops at once
            print("\nCtrl-C: stopping after this step to save last.ckpt", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGINT, ctrl_c)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._align_log_step:
            self._align_log_step = False
            if pl_module.automatic_optimization:
                trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step

    def _restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        self._restore()
        if isinstance(exception, ExportFailed):  # training finished: keep what it made
            trainer.save_checkpoint(self.path)
            print(f"\nexport failed: saved {self.path}", flush=True)
            return
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != "fit":
            return  # e.g. a second Ctrl-C: the step may be half done, nothing worth saving
        trainer.save_checkpoint(self.path)
        what = "Ctrl-C" if self.stopped_by_ctrl_c else "SIGTERM"
        if _in_multirun():  # one path would resume every branch from this branch's state
            advice = (
                "resume the sweep with the same command plus: ckpt_path=auto (each branch "
                "resumes from its own last.ckpt; branches that never started start fresh)"
            )
        else:
            advice = f"resume with the same command plus: ckpt_path={self.path}"
        print(f"\n{what} at step {trainer.global_step}: saved {self.path}\n{advice}", flush=True)

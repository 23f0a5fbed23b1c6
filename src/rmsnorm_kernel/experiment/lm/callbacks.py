"""The language model's own checks and measurements, as Lightning callbacks.

``LMKernelCallCounter``  the kernel-call check for a net with ``2 * layers + 1`` norms
``Throughput``           tokens/s, step time and peak memory, logged and recorded

(The first-batch probe is the shared one, ``core.probe.InitialProbe``, with a ``grad_pattern``.)

They record into ``self.result`` like the default callbacks, so ``metrics.json`` carries them.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import lightning as L
import torch

from ..core.callbacks import KernelCallCounter


class LMKernelCallCounter(KernelCallCounter):
    """``KernelCallCounter`` (``core.callbacks``) for a Llama: ``calls_per_step`` (the ``norm``
    config's, per norm layer: 1 for the kernel) times the ``2 * num_hidden_layers + 1`` norms a
    forward runs (two per decoder layer, one final), from the config, not from the built model.
    """

    def __init__(self, calls_per_step: int, num_hidden_layers: int) -> None:
        super().__init__(int(calls_per_step) * (2 * int(num_hidden_layers) + 1))


class Throughput(L.Callback):
    """Times every training step (forward, backward, optimizer) and tracks peak memory.

    Each step is bracketed by ``torch.cuda.synchronize`` on a GPU, so the time is the step's,
    not the launch queue's. Logs ``perf/step_time_ms``, ``perf/tokens_per_s`` and (GPU)
    ``perf/peak_memory_gib`` at every step. ``result``, over the steps after ``warmup_steps``
    (kernel compilation and allocator growth happen in the first ones): ``tokens_per_s`` and
    ``step_time_ms`` (medians), ``peak_memory_gib`` (``max_memory_allocated`` since training
    started, GPU only, else None), ``start_memory_gib`` (``memory_allocated`` then: the weights)
    and ``timed_steps``.

    Tokens per step are counted from the batch, over every process (``inputs.numel()`` x
    ``trainer.world_size``: under DDP each rank takes an equal share); peak memory is this
    process's GPU (rank 0's in ``metrics.json``).

    Args:
        warmup_steps: leading steps left out of the medians.
    """

    def __init__(self, warmup_steps: int = 5) -> None:
        self.warmup_steps = int(warmup_steps)
        self.tokens_per_step = 0
        self.result: dict[str, Any] = {}
        self._times: list[float] = []
        self._start = 0.0
        self._start_memory: float | None = None

    def _sync(self, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._times = []
        self._start_memory = None
        if pl_module.device.type == "cuda":
            # Runs of a sweep share the process: free what earlier runs left before measuring,
            # and record what is still held (this run's weights, and any leak, show up here).
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(pl_module.device)
            self._start_memory = torch.cuda.memory_allocated(pl_module.device) / 2**30

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._sync(pl_module)
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._sync(pl_module)
        seconds = time.perf_counter() - self._start
        self._times.append(seconds)
        self.tokens_per_step = batch[0].numel() * trainer.world_size
        metrics = {
            "perf/step_time_ms": 1e3 * seconds,
            "perf/tokens_per_s": self.tokens_per_step / seconds,
        }
        if pl_module.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(pl_module.device) / 2**30
            metrics["perf/peak_memory_gib"] = peak
        if trainer.logger is not None:
            trainer.logger.log_metrics(metrics, step=trainer.global_step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        timed = self._times[self.warmup_steps :]
        if not timed:
            raise ValueError(
                f"Throughput: {len(self._times)} training steps leave none after "
                f"warmup_steps={self.warmup_steps}; train longer or lower the warm-up"
            )
        step = statistics.median(timed)
        peak = None
        if pl_module.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(pl_module.device) / 2**30
        self.result = {
            "tokens_per_s": self.tokens_per_step / step,
            "step_time_ms": 1e3 * step,
            "peak_memory_gib": peak,
            "start_memory_gib": self._start_memory,
            "timed_steps": len(timed),
        }

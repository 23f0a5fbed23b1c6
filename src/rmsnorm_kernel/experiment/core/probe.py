"""The first-batch probe: outputs and gradients before any optimizer step, for every task."""

from __future__ import annotations

import re
from pathlib import Path

import lightning as L
import torch
from safetensors.torch import save_file


class InitialProbe(L.Callback):
    """Saves the model's outputs and gradients on the first batch, before any optimizer step.

    The batch is the first ``batch_size`` rows of the train split (unshuffled, so every branch
    probes the same rows), run in float32 outside any autocast; the loss is the module's training
    loss (``pl_module.loss``). Writes ``path`` (safetensors) with ``output``, ``grad.input`` when
    the inputs are floating point (the MLP's ``(B, in)``; token ids have none) and
    ``grad.<param>`` for every parameter whose name matches ``grad_pattern`` (a regular
    expression, ``re.search``; None: all). The sweep comparison diffs these files across branches.
    Gradients are cleared afterwards, so training starts exactly as it would without the probe.
    Under DDP global rank 0 alone probes and writes (the net, not the DDP wrapper, runs, so no
    rank waits on it).
    """

    def __init__(self, path: str | Path, batch_size: int, grad_pattern: str | None = None) -> None:
        self.path = Path(path)
        self.batch_size = int(batch_size)
        self.grad_pattern = None if grad_pattern is None else re.compile(grad_pattern)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step != 0:
            return  # resumed run: "before any step" is long gone
        if not trainer.is_global_zero:
            return
        inputs, targets = (t[: self.batch_size] for t in trainer.datamodule.splits["train"])
        net = pl_module.net
        device = pl_module.device
        inputs = inputs.to(device)
        if inputs.is_floating_point():
            inputs.requires_grad_(True)
        with torch.enable_grad(), torch.autocast(device.type, enabled=False):
            output = net(inputs)
            pl_module.loss(output, targets.to(device)).backward()
        tensors = {"output": output.detach()}
        if inputs.grad is not None:
            tensors["grad.input"] = inputs.grad
        params = {
            f"grad.{name}": param.grad
            for name, param in net.named_parameters()
            if self.grad_pattern is None or self.grad_pattern.search(name)
        }
        if not params:
            raise ValueError(f"InitialProbe: no parameter name matches {self.grad_pattern}")
        tensors.update(params)
        net.zero_grad(set_to_none=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(self.path))

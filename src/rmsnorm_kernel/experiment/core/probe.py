"""The first-batch probe: outputs and gradients before any optimizer step, for every task."""

from __future__ import annotations

import re
from pathlib import Path

import lightning as L
import torch
from safetensors.torch import save_file

#: Parameter dtypes the probe casts up to float32 for its pass.
LOW_PRECISION = (torch.float16, torch.bfloat16)


def _named_tensors(net: torch.nn.Module):
    yield from (("p." + n, t) for n, t in net.named_parameters())
    yield from (("b." + n, t) for n, t in net.named_buffers())


class InitialProbe(L.Callback):
    """Saves the model's outputs and gradients on the first batch, before any optimizer step.

    The batch is the first ``batch_size`` rows of the train split (unshuffled, so every branch
    probes the same rows), run in float32 outside any autocast; the loss is the module's training
    loss (``pl_module.loss``). Writes ``path`` (safetensors) with ``output``, ``grad.input`` when
    the inputs are floating point (the MLP's ``(B, in)``; token ids have none) and
    ``grad.<param>`` for every parameter whose name matches ``grad_pattern`` (a regular
    expression, ``re.search``; None: all). The sweep comparison diffs these files across branches.
    Gradients are cleared afterwards, so training starts exactly as it would without the probe.
    A net held in float16/bfloat16 (``trainer.precision=bf16-true``) is probed in float32 too: its
    weights are cast up for the probe and back after (exact both ways), so every branch is probed
    on the same float32 values and the float32 tolerance keeps its meaning.
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
        held = {n: t.dtype for n, t in _named_tensors(net)}
        lowered = any(d in LOW_PRECISION for d in held.values())
        if lowered:
            net.float()
        try:
            with torch.enable_grad(), torch.autocast(device.type, enabled=False):
                output = net(inputs)
                pl_module.loss(output, targets.to(device)).backward()
            tensors = self._tensors(net, inputs, output)
        finally:
            if lowered:  # back to the held dtypes (float32 -> bf16 of a bf16 value is exact)
                for n, t in _named_tensors(net):  # module.float() replaced the buffers
                    t.data = t.data.to(held[n])
        net.zero_grad(set_to_none=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(self.path))

    def _tensors(self, net, inputs, output) -> dict[str, torch.Tensor]:
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
        return {k: v.detach().clone() for k, v in tensors.items()}

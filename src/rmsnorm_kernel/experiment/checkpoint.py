"""Exported weights: one safetensors file per run that can check its own reload.

A file holds the net's ``state_dict`` plus two reserved tensors, the test inputs and the
predictions the trained net made on them, and string metadata with the net's Hydra config (so a
fresh net can be built without the run's config), the run name, norm, seed and device::

    fc1.weight, fc1.bias, norm.weight, fc2.weight, fc2.bias   the weights
    check.test_inputs       (n_test, in_features)  float32
    check.test_predictions  (n_test, out_features) float32

:func:`verify_checkpoint` rebuilds the net, loads the weights and requires the recomputed
predictions to be bitwise identical to the stored ones. Predictions are only bitwise-reproducible
on the device type that made them, so verification runs there (and refuses otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

FORMAT = "rmsnorm_kernel.experiment.checkpoint/1"
INPUTS = "check.test_inputs"
PREDICTIONS = "check.test_predictions"
REQUIRED_METADATA = ("format", "net", "device")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable (e.g. truncated) or does not match what it claims."""


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bytes (stricter than ``==``: tells -0.0 from 0.0, NaN equals NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a_bytes = a.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    b_bytes = b.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    return torch.equal(a_bytes, b_bytes)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` in float64 (0.0 for empty tensors); inf when shapes differ."""
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    return (a.detach().double().cpu() - b.detach().double().cpu()).abs().max().item()


@torch.no_grad()
def predict(net: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """``inputs (n, in)`` -> ``(n, out)`` in eval mode, one batch, on the net's device."""
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    out = net(inputs.to(device))
    net.train(was_training)
    return out


def build_net(net_config: Mapping[str, Any], device: torch.device | str = "cpu") -> nn.Module:
    """A fresh net from its Hydra config (``_target_`` + arguments), on ``device``."""
    return instantiate(dict(net_config)).to(device)


def save_checkpoint(
    path: Path,
    net: nn.Module,
    net_config: Mapping[str, Any],
    test_inputs: torch.Tensor,
    metadata: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """Write ``net``'s weights, the test inputs and its predictions on them to ``path``.

    Returns the predictions ``(n_test, out)`` (on the net's device).
    """
    predictions = predict(net, test_inputs)
    device = predictions.device
    tensors = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    tensors[INPUTS] = test_inputs.detach().cpu().contiguous()
    tensors[PREDICTIONS] = predictions.cpu().contiguous()
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    meta.update(format=FORMAT, net=json.dumps(dict(net_config)), device=device.type)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written to a temporary name first: an interrupted save never leaves a half file behind
    # under the real name.
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)
    return predictions


def load_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of ``path``; :class:`CheckpointError` naming it when unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors reports truncation as several error types
        raise CheckpointError(
            f"{path}: unreadable safetensors file, truncated or corrupt ({type(e).__name__}: {e})"
        ) from e
    missing = [k for k in REQUIRED_METADATA if k not in metadata]
    if missing or metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: not an experiment checkpoint (format {metadata.get('format')!r}, "
            f"missing metadata {missing}); expected format {FORMAT!r}"
        )
    for key in (INPUTS, PREDICTIONS):
        if key not in tensors:
            raise CheckpointError(f"{path}: missing tensor {key!r}")
    return tensors, metadata


def resolve_device(recorded: str, device: str | None) -> torch.device:
    """The device to verify on: ``device`` if given, else the one that made the predictions."""
    if device is not None:
        return torch.device(device)
    if recorded == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(
            "predictions were made on cuda and bitwise reproduction needs the same device type; "
            "no CUDA here (pass device='cpu' / --device cpu to compare anyway)"
        )
    return torch.device(recorded)


def verify_checkpoint(path: Path, device: str | None = None) -> dict[str, Any]:
    """Rebuild the net from ``path``, reload its weights, and require bitwise-equal predictions.

    Returns ``{"path", "run_name", "norm", "seed", "device", "tensors", "reload_max_diff"}``;
    raises :class:`CheckpointError` naming the file on any mismatch.
    """
    path = Path(path)
    tensors, metadata = load_checkpoint(path)
    try:
        target = resolve_device(metadata["device"], device)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from e
    net_config = json.loads(metadata["net"])
    weights = {k: v for k, v in tensors.items() if k not in (INPUTS, PREDICTIONS)}
    try:
        net = build_net(net_config, target)
        net.load_state_dict(weights, strict=True)
    except Exception as e:  # missing/unexpected keys, wrong shapes, unknown _target_
        raise CheckpointError(
            f"{path}: weights do not match the net it describes ({type(e).__name__}: {e})"
        ) from e
    for name, value in net.state_dict().items():
        if not bitwise_equal(value, weights[name]):
            raise CheckpointError(f"{path}: tensor {name!r} changed on reload")
    predictions = predict(net, tensors[INPUTS])
    stored = tensors[PREDICTIONS]
    diff = max_abs_diff(predictions, stored)
    if not bitwise_equal(predictions.cpu(), stored):
        raise CheckpointError(
            f"{path}: reloaded predictions differ from the stored ones "
            f"(max abs diff {diff:.3g}, expected 0 bitwise)"
        )
    return {
        "path": str(path),
        "run_name": metadata.get("run_name", path.stem),
        "norm": metadata.get("norm", "?"),
        "seed": metadata.get("seed", "?"),
        "device": target.type,
        "tensors": len(weights),
        "reload_max_diff": diff,
    }

"""The one registry of RMSNorm implementations we time ourselves against.

Each entry names an implementation, says what it needs installed, and builds a forward
``f(x (M, N), weight (N,)) -> y (M, N)`` (same dtype as ``x``) for a given eps; its backward is
whatever autograd does with that ``y``. Every benchmark and probe reads this table, so a peer is
called the same way everywhere.

A peer that is not installed is reported as ``not installed: <why>`` wherever it would appear,
never dropped.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass

import torch

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Peer:
    name: str  # config key, e.g. benchmark.implementations: [ours, torch, ...]
    label: str  # shown in tables and figures
    module: str  # imported to decide whether it is installed
    distribution: str | None  # pip name, for the version in the JSON
    build: Callable[[float], Forward]  # eps -> forward
    notes: str

    def missing(self) -> str | None:
        """``None`` when importable, else ``"not installed: <ImportError>"``."""
        try:
            importlib.import_module(self.module)
        except Exception as exc:  # a broken install is as unusable as a missing one
            return f"not installed: {type(exc).__name__}: {exc}"
        return None

    def version(self) -> str | None:
        if self.distribution is None:
            return None
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None


def _ours(eps: float) -> Forward:
    from rmsnorm_kernel import rmsnorm

    return lambda x, w: rmsnorm(x, w, eps)


def _reference(eps: float) -> Forward:
    from rmsnorm_kernel.reference import rmsnorm_reference

    return lambda x, w: rmsnorm_reference(x, w, eps)


def _torch(eps: float) -> Forward:
    rms_norm = torch.nn.functional.rms_norm
    return lambda x, w: rms_norm(x, (x.shape[-1],), w, eps)


def _compile(eps: float) -> Forward:
    from rmsnorm_kernel.reference import rmsnorm_reference

    # dynamic=False: one specialised graph per shape, as a model of fixed width gets. Callers
    # reset Dynamo between shapes, or its recompile limit silently runs later shapes eagerly.
    compiled = torch.compile(rmsnorm_reference, dynamic=False)
    return lambda x, w: compiled(x, w, eps)


def _liger(eps: float) -> Forward:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    # (X, W, eps, offset, casting_mode, in_place): in_place=False keeps dy intact, as ours does.
    return lambda x, w: LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)


def _quack(eps: float) -> Forward:
    from quack.rmsnorm import rmsnorm

    return lambda x, w: rmsnorm(x, w, eps=eps)


_ENTRIES = (
    Peer(
        name="ours",
        label="rmsnorm_kernel",
        module="rmsnorm_kernel",
        distribution=None,
        build=_ours,
        notes="this package's Triton kernels through rmsnorm_kernel.rmsnorm",
    ),
    Peer(
        name="reference",
        label="reference (eager)",
        module="rmsnorm_kernel.reference",
        distribution=None,
        build=_reference,
        notes="the tutorial's PyTorch composite, eager, float32 math",
    ),
    Peer(
        name="torch",
        label="F.rms_norm",
        module="torch",
        distribution="torch",
        build=_torch,
        notes="PyTorch's fused kernel, C++ autograd",
    ),
    Peer(
        name="compile",
        label="torch.compile(reference)",
        module="torch",
        distribution="torch",
        build=_compile,
        notes="Inductor-generated Triton from the reference, one graph per shape",
    ),
    Peer(
        name="liger",
        label="Liger",
        module="liger_kernel.ops.rms_norm",
        distribution="liger-kernel",
        build=_liger,
        notes="Liger-Kernel's Triton RMSNorm, llama casting, not in place",
    ),
    Peer(
        name="quack",
        label="quack",
        module="quack.rmsnorm",
        distribution="quack-kernels",
        build=_quack,
        notes="quack's CuTe-DSL kernels (Hopper and newer)",
    ),
)
PEERS: dict[str, Peer] = {p.name: p for p in _ENTRIES}


def build(names, eps: float) -> dict[str, Forward | str]:
    """``name -> forward``, or ``name -> "not installed: ..."`` / ``"fails: ..."`` (a status)."""
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise KeyError(f"unknown implementations {unknown} (known: {list(PEERS)})")
    out: dict[str, Forward | str] = {}
    for name in names:
        peer = PEERS[name]
        missing = peer.missing()
        if missing is not None:
            out[name] = missing
            continue
        try:
            out[name] = peer.build(eps)
        except Exception as exc:  # built badly is a result about that peer, not a crash
            out[name] = f"fails: {type(exc).__name__}: {exc}"
    return out

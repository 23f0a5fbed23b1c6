"""Planted wrong branches, for tests only: the LM comparison's criterion must fail them.

- ``norm=planted_eps``: Hugging Face's ``LlamaRMSNorm`` with eps x 100 (a wrong constant; the
  forward is off by a few percent where activations are small, as at initialisation).
- ``norm=planted_grad``: ``LlamaRMSNorm``'s exact forward with the classic kernel bug in its
  backward: dx = dy * w * r, without the ``- x * r^3 * mean(dy * w * x)`` projection term.

Nothing here is importable from ``src/``: the norms' configs live in
``tests/experiment/planted_conf/norm/`` (added to Hydra's search path by :data:`SEARCHPATH`) and
their builders are registered only inside :func:`planted_norm`. ``python
tests/experiment/planted_train.py ARGS`` runs ``rmsnorm_kernel.train`` with them (the GPU check).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from rmsnorm_kernel.experiment.core import builders

NAME = "planted_eps"
GRAD_NAME = "planted_grad"
#: The planted error of ``planted_eps``: eps multiplied by this.
EPS_FACTOR = 100.0
#: The override that puts ``planted_conf/`` on Hydra's search path (``norm=planted_eps``).
SEARCHPATH = f"hydra.searchpath=[file://{Path(__file__).parent / 'planted_conf'}]"


def _size(normalized_shape) -> int:
    (n,) = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return n


def _planted_eps(normalized_shape, eps: float = 1e-6) -> nn.Module:
    """``LlamaRMSNorm(N, eps * 100)``: right shape, right weight, wrong eps."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    return LlamaRMSNorm(_size(normalized_shape), eps=eps * EPS_FACTOR)


class _NoProjection(torch.autograd.Function):
    """``x [..., N]`` -> ``(x * r)`` in x's dtype (r in float32); backward ``dy * r`` only."""

    @staticmethod
    def forward(ctx, x, eps):
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(r)
        return (xf * r).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        (r,) = ctx.saved_tensors
        return (dy.float() * r).to(dy.dtype), None  # the projection term is missing


class PlantedGradNorm(nn.Module):
    """``LlamaRMSNorm``'s forward, bit for bit; its dx lacks the projection term."""

    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.weight * _NoProjection.apply(hidden_states, self.variance_epsilon)


def _planted_grad(normalized_shape, eps: float = 1e-6) -> nn.Module:
    return PlantedGradNorm(_size(normalized_shape), eps)


@contextlib.contextmanager
def planted_norm() -> Iterator[str]:
    """``norm=planted_eps`` and ``norm=planted_grad`` buildable inside the block; removed from
    the allow-list after."""
    builders._load_providers()  # so a later lookup does not re-import over the removal
    builders.register_norm(NAME, _planted_eps)
    builders.register_norm(GRAD_NAME, _planted_grad)
    try:
        yield NAME
    finally:
        builders.NORMS.pop(NAME, None)
        builders.NORMS.pop(GRAD_NAME, None)

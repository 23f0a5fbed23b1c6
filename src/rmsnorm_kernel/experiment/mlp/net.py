"""The MLP every branch trains: input -> Linear -> RMSNorm -> SiLU -> Linear -> output.

Importing this module registers its builder as ``"mlp"`` in the builders' allow-list.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..core.builders import check_eps, positive_int, register_builder, usable_norm


class MLP(nn.Module):
    """``x (B, in_features) -> (B, out_features)``, float32.

    ``norm`` is a factory ``norm(hidden_features, eps=eps) -> nn.Module`` (a Hydra partial from
    the ``norm`` group), so the branches differ only in that one layer. It is built between the
    two Linears, and none of the norms draws random numbers (weights start at ones), so the same
    seed gives bitwise-equal weights in every branch. ``state_dict`` keys: ``fc1.weight``,
    ``fc1.bias``, ``norm.weight``, ``fc2.weight``, ``fc2.bias``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int,
        norm: Callable[..., nn.Module],
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.norm = norm(hidden_features, eps=eps)
        self.act = nn.SiLU()
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)  # (B, in) -> (B, hidden)
        h = self.act(self.norm(h))  # (B, hidden), each row normalised
        return self.fc2(h)  # (B, hidden) -> (B, out)


def check_mlp(
    in_features: int,
    hidden_features: int,
    out_features: int,
    norm: str,
    eps: float = 1e-6,
    field: str = "net",
) -> None:
    """The value rules of :func:`build_mlp`'s arguments (it runs them first; the training
    pre-check runs them alone): sizes integers >= 1, eps a finite number > 0, a norm that can be
    built here. :class:`SpecError` names ``<field>.<argument>``."""
    check_eps(eps, field)
    for name, value in (
        ("in_features", in_features),
        ("hidden_features", hidden_features),
        ("out_features", out_features),
    ):
        positive_int(name, value, field)
    usable_norm(norm, f"{field}.norm")


def build_mlp(
    in_features: int, hidden_features: int, out_features: int, norm: str, eps: float = 1e-6
) -> MLP:
    """``MLP(in -> hidden -> RMSNorm(norm) -> SiLU -> out)``; every argument checked first."""
    check_mlp(in_features, hidden_features, out_features, norm, eps)
    return MLP(
        in_features,
        hidden_features,
        out_features,
        norm=usable_norm(norm, "net.norm"),
        eps=float(eps),
    )


register_builder("mlp", build_mlp, check=check_mlp)

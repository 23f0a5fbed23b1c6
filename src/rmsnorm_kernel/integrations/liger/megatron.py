"""Liger-Kernel's Megatron-Core norm, ``liger_kernel.megatron.rms_norm.LigerMegatronRMSNorm``.

A module with Megatron-Core's ``LayerNormBuilder`` constructor (``config, hidden_size, eps,
persist_layer_norm, zero_centered_gamma, normalization``) that Megatron slots in where it builds
``WrappedTorchNorm`` / ``FusedLayerNorm``; megatron-core itself is not imported (``config`` is read
duck-typed: ``normalization``, ``sequence_parallel``, ``layernorm_zero_centered_gamma``). As in
Liger's main branch of 2026-08: Llama's rounding (:mod:`.rms_norm`'s ``"llama"`` mode), the
zero-centred gamma as ``offset=1`` over a weight that starts at zeros, and the weight marked
``sequence_parallel`` from the config, the flag Megatron's optimizer reads to all-reduce its
gradient across tensor-parallel ranks.
"""

from __future__ import annotations

import numbers

import torch
from torch.nn import Parameter, init

from ...contract import ContractTypeError, ContractValueError, check_real
from .rms_norm import _forward


class LigerMegatronRMSNorm(torch.nn.Module):
    """``forward(x [..., hidden_size])`` -> ``y`` in x's dtype (see the module docstring).

    Args (Liger's): ``config`` (duck-typed), ``hidden_size`` (an int, or a one-element shape),
    ``eps=1e-5``, ``persist_layer_norm`` (accepted, unused), ``zero_centered_gamma`` (or the
    config's ``layernorm_zero_centered_gamma``), ``normalization`` (accepted; the config's
    ``normalization`` must be ``"RMSNorm"``).
    """

    def __init__(
        self,
        config,
        hidden_size,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str = "RMSNorm",
    ):
        super().__init__()
        cfg_norm = getattr(config, "normalization", "RMSNorm")
        if cfg_norm != "RMSNorm":
            raise ContractValueError(
                f"LigerMegatronRMSNorm requires config.normalization='RMSNorm'; got {cfg_norm!r}."
            )
        check_real("eps", eps)
        self.config = config
        self.zero_centered_gamma = bool(
            zero_centered_gamma or getattr(config, "layernorm_zero_centered_gamma", False)
        )
        if isinstance(hidden_size, numbers.Integral):
            hidden_size = (hidden_size,)
        if not isinstance(hidden_size, (tuple, list, torch.Size)) or not all(
            isinstance(d, numbers.Integral) for d in hidden_size
        ):
            raise ContractTypeError(
                "hidden_size must be an int or a one-element shape of ints (got "
                f"{type(hidden_size).__name__} {hidden_size!r})"
            )
        self.hidden_size = torch.Size(hidden_size)
        if len(self.hidden_size) != 1:
            raise ContractValueError(
                "hidden_size must be an int or a one-element shape: the norm is over the last dim "
                f"(got {tuple(self.hidden_size)})"
            )
        self.eps = eps
        self._offset = 1.0 if self.zero_centered_gamma else 0.0
        self.weight = Parameter(torch.empty(*self.hidden_size))
        self.reset_parameters()
        self.weight.sequence_parallel = bool(getattr(config, "sequence_parallel", False))

    def reset_parameters(self) -> None:
        if self.zero_centered_gamma:
            init.zeros_(self.weight)
        else:
            init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _forward(x, self.weight, self.eps, self._offset, "llama")

    def extra_repr(self) -> str:
        return (
            f"hidden_size={tuple(self.hidden_size)}, eps={self.eps}, "
            f"zero_centered_gamma={self.zero_centered_gamma}"
        )

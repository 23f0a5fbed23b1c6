"""A Hugging Face ``LlamaForCausalLM`` as an experiment net, with each RMSNorm branch.

``build_llama`` is registered in the builders' allow-list as ``"llama"``: its arguments are plain
numbers and names, stored as the spec of every exported checkpoint, so a reload rebuilds exactly
this net. The ``norm`` argument picks the branch:

    hf       the model's own ``LlamaRMSNorm`` (the baseline)
    triton   ``rmsnorm_kernel.integrations.transformers.patch``: the same modules, kernel forward
    triton_fused   the same, with ``fuse_residual=True``: each decoder layer's post-attention
             residual add happens inside the norm's kernel
    torch, reference, liger, ...   every ``LlamaRMSNorm`` replaced by that registered norm layer

Importing this module registers the builder and the ``hf``, ``liger`` and ``triton_fused`` norm
names (``triton_fused`` is the plain kernel layer in nets without a residual stream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import nn

import rmsnorm_kernel

from .builders import SpecError, register_builder, register_norm, resolve_norm


def _llama_rmsnorm(normalized_shape, eps: float = 1e-6) -> nn.Module:
    """``LlamaRMSNorm(N, eps)``: the ``hf`` norm, also usable in other nets."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    (n,) = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return LlamaRMSNorm(n, eps=eps)


def _liger_rmsnorm(normalized_shape, eps: float = 1e-6) -> nn.Module:
    """Liger-Kernel's ``LigerRMSNorm`` with Llama's rounding (``casting_mode="llama"``)."""
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
    except ImportError as e:
        raise SpecError(
            "norm=liger needs the liger-kernel package (pip install liger-kernel) and a CUDA "
            f"GPU; it is not importable here ({e})"
        ) from e
    (n,) = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return LigerRMSNorm(n, eps=eps, casting_mode="llama")


class CausalLM(nn.Module):
    """``input_ids (B, S) int64 -> logits (B, S, vocab_size)``: a Hugging Face causal LM whose
    forward returns a tensor, as the experiment's checks (probe, export, reload) expect.

    ``state_dict`` keys are the HF model's with an ``lm.`` prefix (``lm.model.layers.0...``).
    """

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"net.{name}: must be an integer >= 1 (got {value!r})")
    return value


def _swap_norms(model: nn.Module, factory: Callable[..., nn.Module], eps: float) -> int:
    """Replace every ``LlamaRMSNorm`` of ``model`` by ``factory(N, eps=eps)``; returns how many.

    The new layer takes the old one's weight values (ones at construction), so no random number
    is drawn and every branch starts from the same weights.
    """
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    targets = [(n, m) for n, m in model.named_modules() if type(m) is LlamaRMSNorm]
    for name, old in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        new = factory(old.weight.shape[0], eps=eps)
        with torch.no_grad():
            new.weight.copy_(old.weight)
        setattr(parent, child, new)
    return len(targets)


def build_llama(
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    max_position_embeddings: int,
    norm: str,
    eps: float = 1e-6,
    attn_implementation: str = "sdpa",
) -> CausalLM:
    """A ``LlamaForCausalLM`` built from a config (float32 weights, no download), norm applied.

    ``2 * num_hidden_layers + 1`` RMSNorms (two per decoder layer, one final) run per forward.
    Every argument is checked before anything is built; unknown norms raise :class:`SpecError`.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise SpecError(f"net.eps: must be a number > 0 (got {eps!r})")
    sizes = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "max_position_embeddings": max_position_embeddings,
    }
    sizes = {k: _positive_int(k, v) for k, v in sizes.items()}
    if hidden_size % num_attention_heads or num_attention_heads % num_key_value_heads:
        raise SpecError(
            "net: hidden_size must be a multiple of num_attention_heads, and that of "
            f"num_key_value_heads (got {hidden_size}, {num_attention_heads}, "
            f"{num_key_value_heads})"
        )
    if attn_implementation not in ("sdpa", "eager"):
        raise SpecError(f"net.attn_implementation: 'sdpa' or 'eager' (got {attn_implementation!r})")
    factory = resolve_norm(norm, "net.norm")
    config = LlamaConfig(
        **sizes,
        rms_norm_eps=float(eps),
        tie_word_embeddings=False,  # safetensors refuses shared tensors; Llama's default anyway
        attention_dropout=0.0,
        attn_implementation=attn_implementation,
    )
    lm = LlamaForCausalLM(config)
    if norm in ("triton", "triton_fused"):
        from ..integrations.transformers import patch

        patch(lm, fuse_residual=norm == "triton_fused")
    elif norm != "hf":
        _swap_norms(lm, factory, float(eps))
    return CausalLM(lm)


register_norm("hf", _llama_rmsnorm)
register_norm("liger", _liger_rmsnorm)
register_norm("triton_fused", rmsnorm_kernel.RMSNorm)
register_builder("llama", build_llama)


class LanguageModelModule(L.LightningModule):
    """Next-token cross-entropy on ``(inputs (B, S) int64, targets (B, S) int64)`` batches.

    Logs ``train/loss`` at every step, and ``val/loss`` / ``test/loss``: the exact mean
    cross-entropy per token over the whole split (float64 sums, so it does not depend on the
    eval batch size). Logits are upcast to float32 before the loss (under ``bf16-mixed`` the LM
    head's output is bfloat16).

    Args:
        net: a :class:`CausalLM` (``model.net``, built through the builders' allow-list).
        optimizer: ``optimizer(params=...) -> torch.optim.Optimizer`` (a Hydra ``_partial_``).
    """

    def __init__(self, net: nn.Module, optimizer: Callable[..., torch.optim.Optimizer]) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net", "optimizer"])
        self.net = net
        self.make_optimizer = optimizer
        self._nll = torch.zeros((), dtype=torch.float64)
        self._count = 0

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.net(input_ids)

    @staticmethod
    def loss(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean"):
        """``logits (B, S, V)``, ``targets (B, S)`` -> cross-entropy in float32."""
        return nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction
        )

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        inputs, targets = batch
        loss = self.loss(self.net(inputs), targets)
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True)
        return loss

    def _accumulate(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        inputs, targets = batch
        nll = self.loss(self.net(inputs), targets, reduction="sum").double()
        self._nll = self._nll.to(nll.device) + nll
        self._count += targets.numel()

    def _flush(self, name: str) -> None:
        mean = self._nll / max(self._count, 1)
        self.log(name, mean, on_step=False, on_epoch=True, prog_bar=True)
        self._nll = torch.zeros((), dtype=torch.float64)
        self._count = 0

    def validation_step(self, batch, batch_idx: int) -> None:
        self._accumulate(batch)

    def on_validation_epoch_end(self) -> None:
        self._flush("val/loss")

    def test_step(self, batch, batch_idx: int) -> None:
        self._accumulate(batch)

    def on_test_epoch_end(self) -> None:
        self._flush("test/loss")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.make_optimizer(params=self.parameters())

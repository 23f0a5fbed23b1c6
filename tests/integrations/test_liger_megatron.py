"""Liger's Megatron-Core norm (``integrations.liger.megatron.LigerMegatronRMSNorm``) against a
float64 reference of Llama's rounding, with and without the zero-centred gamma, and its
Megatron-facing attributes (the ``sequence_parallel`` flag, the builder's arguments)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from peer_refs import BF16, DEVICE, EPS, F16, F32, close, f64, leaf, liger_ref, make_x

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations.liger import LigerMegatronRMSNorm


@pytest.fixture(autouse=True)
def _on_the_kernels_device():
    with torch.device(DEVICE):
        yield


def config(normalization="RMSNorm", sequence_parallel=False, zero_centered=False):
    return SimpleNamespace(
        normalization=normalization,
        sequence_parallel=sequence_parallel,
        layernorm_zero_centered_gamma=zero_centered,
    )


@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
def test_megatron_norm_against_llamas_formula(dtype, zero_centered):
    m = LigerMegatronRMSNorm(config(zero_centered=zero_centered), 37, eps=EPS).to(dtype)
    assert torch.equal(m.weight, torch.full((37,), 0.0 if zero_centered else 1.0, dtype=dtype))
    with torch.no_grad():
        m.weight.add_((torch.randn(37) * 0.3).to(dtype))
    x = leaf(make_x((2, 3, 37), dtype))
    y = m(x)
    assert y.dtype == dtype and y.shape == x.shape
    dy = torch.randn(2, 3, 37).to(dtype)
    x_before = x.detach().clone()
    y.backward(dy)
    assert torch.equal(x.detach(), x_before)  # Megatron's recompute needs the input untouched
    xd, wd = f64(x), f64(m.weight)
    offset = 1.0 if zero_centered else 0.0
    y_ref = liger_ref(xd, wd, offset, "llama", dtype)
    y_ref.backward(dy.double())
    close(y, y_ref, dtype, "y")
    close(x.grad, xd.grad, dtype, "dx")
    close(m.weight.grad, wd.grad, dtype, "dweight")


def test_megatron_attributes():
    m = LigerMegatronRMSNorm(config(sequence_parallel=True), torch.Size([64]), eps=1e-6)
    assert m.hidden_size == torch.Size([64]) and m.eps == 1e-6 and m._offset == 0.0
    assert m.weight.sequence_parallel is True
    assert m.to(BF16).weight.sequence_parallel is True  # kept through a dtype move
    assert LigerMegatronRMSNorm(config(), 64).weight.sequence_parallel is False
    z = LigerMegatronRMSNorm(config(), 64, zero_centered_gamma=True)  # the argument, not config
    assert z.zero_centered_gamma and z._offset == 1.0 and torch.equal(z.weight, torch.zeros(64))
    assert repr(z) == (
        "LigerMegatronRMSNorm(hidden_size=(64,), eps=1e-05, zero_centered_gamma=True)"
    )
    assert list(z.state_dict()) == ["weight"]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(config=config("LayerNorm"), hidden_size=64), "RMSNorm"),
        (dict(config=config(), hidden_size=(4, 16)), "hidden_size"),
        (dict(config=config(), hidden_size=64, eps=None), "eps"),
    ],
)
def test_megatron_refusals(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LigerMegatronRMSNorm(**kwargs)
    assert rk.CALLS["forward"] == 0

"""The first-batch probe (core/probe.py) is float32 whatever dtype the net is held in."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch
from safetensors.torch import load_file

from rmsnorm_kernel.experiment.core.probe import InitialProbe


def _probe(net: torch.nn.Module, path) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    trainer = SimpleNamespace(
        global_step=0, is_global_zero=True, datamodule=SimpleNamespace(splits={"train": (x, y)})
    )
    module = SimpleNamespace(
        net=net, device=torch.device("cpu"), loss=lambda o, t: ((o - t) ** 2).mean()
    )
    InitialProbe(path, batch_size=4).on_train_start(trainer, module)
    return load_file(str(path))


def test_a_bf16_net_is_probed_in_float32_and_left_exactly_as_it_was(tmp_path):
    """Under ``trainer.precision=bf16-true`` Lightning holds the weights in bfloat16; probing them
    there compared bf16 logits against the float32 tolerance (every branch failed by ~5e-2 on
    the H200). The probe casts the weights up for its pass: it equals a float32 net holding the
    same (bf16-representable) values, and the net is then exactly as before."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    net.register_buffer("scale", torch.randn(4))
    low = copy.deepcopy(net).to(torch.bfloat16)
    high = copy.deepcopy(low).float()  # float32 holding the bf16 values
    before = {k: v.clone() for k, v in low.state_dict().items()}

    got, want = _probe(low, tmp_path / "low.safetensors"), _probe(high, tmp_path / "hi.safetensors")
    assert got.keys() == want.keys() and "output" in got and "grad.0.weight" in got
    for key in want:
        assert got[key].dtype == torch.float32, key
        assert torch.equal(got[key], want[key]), key
    after = low.state_dict()
    for key, value in before.items():
        assert after[key].dtype == torch.bfloat16 and torch.equal(after[key], value), key
    assert all(p.grad is None for p in low.parameters())

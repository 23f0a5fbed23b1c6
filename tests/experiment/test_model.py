"""The MLP and the reference norm module; identical starting weights across branches."""

from __future__ import annotations

import torch
from experiment_helpers import compose_cfg

from rmsnorm_kernel.experiment.core.norms import ReferenceRMSNorm
from rmsnorm_kernel.experiment.core.run import build

NORMS = ("reference", "triton", "torch")


def test_same_seed_gives_bitwise_equal_weights_in_every_branch():
    states = {n: build(compose_cfg([f"norm={n}"]))[1].net.state_dict() for n in NORMS}
    base = states["reference"]
    assert list(base) == ["fc1.weight", "fc1.bias", "norm.weight", "fc2.weight", "fc2.bias"]
    for norm, state in states.items():
        assert list(state) == list(base), norm
        for key in base:
            assert torch.equal(state[key], base[key]), (norm, key)


def test_another_seed_gives_other_weights():
    a = build(compose_cfg(["seed=0"]))[1].net.state_dict()
    b = build(compose_cfg(["seed=1"]))[1].net.state_dict()
    assert not torch.equal(a["fc1.weight"], b["fc1.weight"])


def test_branches_agree_on_a_forward(device):
    # The same bound the sweep comparison applies to first-batch outputs (conf/compare/).
    atol = compose_cfg().compare.initial_error_tolerance
    x = torch.randn(8, 16, device=device)
    outs = {n: build(compose_cfg([f"norm={n}"]))[1].net.to(device)(x) for n in NORMS}
    for norm in NORMS:
        assert outs[norm].shape == (8, 4)
        torch.testing.assert_close(outs[norm], outs["reference"], atol=atol, rtol=0)


def test_reference_module_matches_torch_rmsnorm():
    x = torch.randn(5, 3, 257, requires_grad=True)
    ours, theirs = ReferenceRMSNorm(257, eps=1e-6), torch.nn.RMSNorm(257, eps=1e-6)
    with torch.no_grad():
        w = torch.rand(257) + 0.5
        ours.weight.copy_(w)
        theirs.weight.copy_(w)
    torch.testing.assert_close(ours(x), theirs(x))
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert ReferenceRMSNorm(4, elementwise_affine=False).weight is None

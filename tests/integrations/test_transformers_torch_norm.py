"""``patch`` on ``torch.nn.RMSNorm`` modules (models built from PyTorch's own norm, as
torchtitan-style code and some Hugging Face models are) and on this package's own ``RMSNorm``.

- ``torch.nn.RMSNorm`` (and subclasses that keep its forward) is patched with the ``torch`` rule:
  its forward becomes the drop-in ``rmsnorm_kernel.rms_norm`` (the same dtypes, autocast rule and
  eps, None or any finite value); several normalised dims and no weight included. Outputs and
  gradients match the unpatched model, ``unpatch`` restores the class, the model pickles.
- ``rmsnorm_kernel.RMSNorm`` is a ``torch.nn.RMSNorm`` (``isinstance`` holds) that already runs
  the kernels: ``patch`` leaves it as it is and does not count it.
- A subclass named like an RMSNorm that overrides the forward is refused by name; a non-finite
  eps is refused at patch time, naming the module's path.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations.transformers import (
    UnsupportedNormError,
    is_patched,
    patch,
    unpatch,
)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.ours = rk.RMSNorm(8)
        self.plain = nn.RMSNorm(8, eps=1e-5)
        self.two_dims = nn.RMSNorm([2, 4], elementwise_affine=False)
        self.eps_none = nn.RMSNorm(8, eps=None)
        self.eps_negative = nn.RMSNorm(8, eps=-0.25)
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        x = self.plain(self.ours(x))
        x = self.two_dims(x.view(-1, 2, 4)).view(-1, 8)
        return self.eps_negative(self.proj(self.eps_none(x)) + 3.0)  # mean square > 0.25


def _outputs_and_grads(model, x):
    x = x.clone().requires_grad_()
    y = model(x)
    params = [p for p in model.parameters()]
    return (y, *torch.autograd.grad(y.square().sum(), [x, *params]))


# Padding rows of a tile (beyond M) hold zeros: with eps < 0 the interpreter's NumPy warns on
# their square root, whose values are never stored.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_patch_runs_torch_rmsnorm_on_the_kernel(device):
    torch.manual_seed(0)
    model = Net().to(device)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(6, 8, device=device)
    before = _outputs_and_grads(model, x)
    assert patch(model) == 4  # the four torch.nn.RMSNorm modules; ours needs nothing
    assert type(model.ours) is rk.RMSNorm
    assert all(type(m).__name__ == "RMSNorm" and is_patched(m) for m in list(model.children())[1:5])
    rk.reset_calls()
    after = _outputs_and_grads(model, x)
    assert rk.CALLS == {"forward": 5, "backward": 5}
    for a, b in zip(after, before, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    copy = pickle.loads(pickle.dumps(model))
    torch.testing.assert_close(copy(x), after[0], atol=0, rtol=0)
    assert unpatch(model) == 4 and type(model.plain) is nn.RMSNorm


def test_our_module_is_a_torch_rmsnorm():
    norm = rk.RMSNorm((4, 8), eps=1e-5, elementwise_affine=False)
    assert isinstance(norm, nn.RMSNorm)
    assert repr(norm) == repr(nn.RMSNorm((4, 8), eps=1e-5, elementwise_affine=False))


def test_patch_refuses_what_it_cannot_reproduce():
    class ScaledRMSNorm(nn.RMSNorm):
        def forward(self, x):
            return 2 * super().forward(x)

    with pytest.raises(UnsupportedNormError, match="ScaledRMSNorm at '0'"):
        patch(nn.Sequential(ScaledRMSNorm(8)))
    model = nn.Sequential(nn.Linear(8, 8), nn.RMSNorm(8, eps=float("nan")))
    with pytest.raises(UnsupportedNormError, match="at '1': eps must be None or a finite real"):
        patch(model)
    assert type(model[1]) is nn.RMSNorm

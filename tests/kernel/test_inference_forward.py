"""The inference forward (``launch_forward(..., keep_rstd=False)``): nothing will differentiate,
so rstd is neither allocated nor stored (one allocation fewer per call on the host).

The kernel then gets y itself as RSTD's placeholder. Had it stored rstd anyway, each row's value
would land in y's first M elements, after program 0 wrote them (the interpreter runs programs in
order), so the bit-for-bit comparisons with the training launch below would fail.
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import assert_close, oracle_y

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig

BF16 = torch.bfloat16

#: (N, config or None for the heuristic's): one pass, weight loaded after the reduction (block
#: over WEIGHT_FIRST_MAX_BLOCK), chunked rows, several rows per program, packed 16-bit rows.
CASES = [
    (300, ForwardConfig(512, 0, 4)),
    (9000, ForwardConfig(16384, 0, 8)),
    (700, ForwardConfig(256, 0, 4)),
    (300, ForwardConfig(512, 4, 4)),
    (512, ForwardConfig(512, 0, 4, packed=True)),
    (257, None),
]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


#: Each case with and without a residual, but packed rows: they take none (ForwardConfig.packed).
RESIDUAL_CASES = [
    (n, cfg, r) for n, cfg in CASES for r in (False, True) if not (r and cfg and cfg.packed)
]


@pytest.mark.parametrize(
    "n, cfg, with_residual", RESIDUAL_CASES, ids=[f"N{n}-{c}-r{r}" for n, c, r in RESIDUAL_CASES]
)
def test_inference_launch_stores_no_rstd_and_the_same_bits(device, n, cfg, with_residual):
    m, dtype = 6, BF16
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    res = torch.randn(m, n, device=device).to(dtype) if with_residual else None
    args = (x, w, res, 1e-6, 0.0, dtype)
    y, h, rstd = ops.launch_forward(*args, config=cfg)
    y_inf, h_inf, rstd_inf = ops.launch_forward(*args, config=cfg, keep_rstd=False)
    assert rstd is not None and rstd.shape == (m,)
    assert rstd_inf is None
    assert torch.equal(_bits(y_inf), _bits(y)), f"y differs from the training launch ({cfg})"
    if with_residual:
        assert torch.equal(_bits(h_inf), _bits(h)), "h differs from the training launch"
        assert_close(y_inf, oracle_y(h.float(), w), dtype, "inference y")
    else:
        assert h_inf is None
        assert_close(y_inf, oracle_y(x, w), dtype, "inference y")


def test_no_rows_gives_no_rstd(device):
    x = torch.empty(0, 64, device=device)
    y, h, rstd = ops.launch_forward(x, None, None, 1e-6, 0.0, x.dtype, keep_rstd=False)
    assert y.shape == (0, 64) and h is None and rstd is None


def _spy(monkeypatch) -> list[bool]:
    seen: list[bool] = []
    real = ops.launch_forward

    def spy(*args, **kwargs):
        seen.append(kwargs.get("keep_rstd", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, "launch_forward", spy)
    return seen


def test_rmsnorm_without_grad_takes_the_inference_launch(device, monkeypatch):
    x = torch.randn(3, 5, 96, device=device)
    w = torch.randn(96, device=device, requires_grad=True)
    seen = _spy(monkeypatch)
    with torch.no_grad():
        y_inf = rk.rmsnorm(x, w, 1e-6)
    y_inf_module = rk.RMSNorm(96, eps=1e-6, device=device).requires_grad_(False)(x)
    y = rk.rmsnorm(x, w, 1e-6)  # weight requires grad: the training launch
    assert seen == [False, False, True]
    assert torch.equal(y_inf, y.detach())
    assert_close(y_inf_module, oracle_y(x, None), torch.float32, "module y without grad")


def test_torch_func_forward_keeps_no_rstd(device, monkeypatch):
    """torch.func's Function recomputes its backward in PyTorch ops: no rstd to keep."""
    x = torch.randn(4, 64, device=device)
    w = torch.randn(64, device=device)
    seen = _spy(monkeypatch)
    grad = torch.func.grad(lambda w_: rk.rmsnorm(x, w_, 1e-6).sum())(w)
    assert seen == [False]
    expected = torch.func.grad(lambda w_: rk.rmsnorm_reference(x, w_, 1e-6).sum())(w)
    torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "cfg, keep, expected",
    [
        (ForwardConfig(512, 0, 4, packed=True), False, True),  # PACKED_STORES_RSTD
        (ForwardConfig(512, 0, 4), False, False),
        (ForwardConfig(512, 4, 4), False, False),
        (ForwardConfig(512, 0, 4), True, True),
    ],
)
def test_the_launch_stores_rstd_where_the_config_says(device, monkeypatch, cfg, keep, expected):
    """The packed pass stores rstd even for inference (PACKED_STORES_RSTD: without the store its
    registers halve the CTAs per SM on sm_90), into a buffer of its own that inference still
    does not return; the other kernels drop the store there."""
    stored: list[bool] = []
    for launcher in (ops.FORWARD, ops.FORWARD_ROWS):
        real = launcher.launch
        # STORE_RSTD's place from the end: consts run to the end of each kernel's signature
        names = launcher.fn.arg_names
        back = len(names) - names.index("STORE_RSTD")

        def spy(grid, tensors, floats, consts, *rest, _real=real, _back=back):
            stored.append(consts[-_back])
            if consts[-_back]:
                assert tensors[5] is not tensors[3], "rstd stored through y's placeholder"
            return _real(grid, tensors, floats, consts, *rest)

        # In the instance's own dict, so that undo deletes it: pytest 8's setattr undo sets
        # the bound method back on the instance, which then shadows any later patch of the
        # class (test_llama_rounding's launch counter saw no forward on the H200).
        monkeypatch.setitem(vars(launcher), "launch", spy)
    x = torch.randn(6, 512, device=device).to(BF16)
    y_train, _, _ = ops.launch_forward(x, None, None, 1e-6, 0.0, BF16, config=cfg)
    stored.clear()
    y, _, rstd = ops.launch_forward(x, None, None, 1e-6, 0.0, BF16, config=cfg, keep_rstd=keep)
    assert stored == [expected]
    assert config.stores_rstd(cfg, keep) is expected
    assert (rstd is not None) is keep
    assert torch.equal(_bits(y), _bits(y_train))

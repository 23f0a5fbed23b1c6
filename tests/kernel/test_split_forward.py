"""The split-row forward (``ForwardConfig.split``: each row over ``split`` programs of one
cooperative launch) against the float64 oracle, with every feature of the one-row kernel
(weight or none, offset, residual, Llama's rounding, float64, strided rows, weight views).

Each case runs both kernels: the default (the next two chunks in registers) and the staged one
(``stages`` > 1: the chunk loads pipelined into shared memory, the wait in asm when compiled),
which must give the same bits.
On the CPU the interpreter runs programs one after another, so only ``split = 1`` can run there
(one program a row, the same code: publish, wait, scale, reset); on a GPU 2-16 programs a row,
ragged widths, more rows than the grid holds at once (the persistent walk), CUDA-graph replay,
and the counters left whole (multiples of the split) for the next launch.
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import (
    TOLERANCES,
    assert_close,
    assert_graph_replays,
    feature_matrix,
    feature_rows,
    forward_with,
    oracle,
    oracle_y,
)

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig
from rmsnorm_kernel.contract import ContractValueError

BF16 = torch.bfloat16
EPS = 1e-6

_launch = forward_with


def _counters_whole(x, split):
    """The split kernel's counters of ``split`` on this stream are multiples of ``split`` (each
    launch adds exactly ``split`` to each row it walks): no arrival lost, none left over."""
    index = ops._device_index(x)
    if index is None:
        return  # the interpreter's launches get fresh zeros each time
    counts = ops.split_counters(x.device, index, split, 1)
    assert not (counts % split).any(), f"counters of split={split} not multiples of it"


def _split_of(n: int, device: str) -> list[ForwardConfig]:
    """Split configs covering ``n`` columns: one program a row on the CPU (the interpreter
    cannot run more), 2-16 on a GPU, each with the narrowest power-of-two block that covers,
    through the default kernel; the staged one (3 stages) at one program a row on the CPU and 8
    on a GPU (each config is a compile: the GPU run stays within minutes; 1 and 3 programs a row
    in test_the_staged_kernel_gives_the_default_kernels_bits)."""
    splits = (1,) if device == "cpu" else (1, 2, 3, 4, 8, 16)
    staged = 1 if device == "cpu" else 8
    out = []
    for c in splits:
        block = 1 << max(0, (-(-n // c) - 1).bit_length())
        out.append(ForwardConfig(block, 0, 4, split=c))
        if c == staged:
            out.append(ForwardConfig(block, 0, 4, split=c, stages=3))
    return out


def test_the_staged_kernel_gives_the_default_kernels_bits(device):
    """The same tasks, partials and order of additions: y, h and rstd equal bit for bit."""
    n = 700
    x = torch.randn(6, n, device=device).to(BF16)
    res = torch.randn(6, n, device=device).to(BF16)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(BF16)
    for c in (1,) if device == "cpu" else (1, 3, 8):
        block = 1 << (-(-n // c) - 1).bit_length()
        for r in (None, res):
            want = _launch(x, w, ForwardConfig(block, 0, 4, split=c), residual=r)
            got = _launch(x, w, ForwardConfig(block, 0, 4, split=c, stages=3), residual=r)
            for a, b, name in zip(want, got, ("y", "h", "rstd"), strict=True):
                assert (a is None) == (b is None), name
                assert a is None or torch.equal(a, b), (
                    f"{name}, split={c}, residual {r is not None}"
                )


@pytest.mark.parametrize("dtype", [torch.float32, BF16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("n", [1, 300, 1000])
def test_split_matches_the_oracle(device, dtype, n):
    m = 5 if device == "cpu" else 300  # on a GPU: more rows than one grid step holds
    x = torch.randn(m, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    for cfg in _split_of(n, device):
        y, h, rstd = _launch(x, w, cfg)
        assert h is None
        assert_close(y, oracle_y(x, w), dtype, f"y with {cfg}")
        want_r = torch.rsqrt(x.double().pow(2).mean(-1) + EPS)
        torch.testing.assert_close(rstd.double(), want_r, **TOLERANCES[torch.float32])
        assert rstd.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
        y2, _, rstd2 = _launch(x, w, cfg)
        assert torch.equal(y, y2) and torch.equal(rstd, rstd2), f"{cfg} not reproducible"
        _counters_whole(x, cfg.split)


@feature_matrix
def test_split_features(device, offset, with_weight, llama):
    """Offset, no weight and Llama's rounding (x * r rounded to x's dtype before the weight)."""
    x, w = feature_rows(device, with_weight)
    for cfg in _split_of(x.shape[1], device):
        y, _, _ = _launch(x, w, cfg, offset=offset, llama=llama)
        plain, _, _ = _launch(x, w, ForwardConfig(1024, 0, 4), offset=offset, llama=llama)
        assert_close(y, oracle_y(x, w, offset=offset), BF16, f"y with {cfg}")
        # one pass over the same row: the same function, within one rounding of the sum order
        torch.testing.assert_close(y.float(), plain.float(), atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, BF16], ids=str)
def test_split_residual(device, dtype):
    """h = x + residual, rounded to x's dtype, is returned and normalised."""
    n = 513
    x = torch.randn(6, n, device=device).to(dtype)
    res = torch.randn(6, n, device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(n, device=device)).to(dtype)
    dy = torch.zeros(6, n, device=device, dtype=dtype)
    want_y, want_h, *_ = oracle(x, w, dy, EPS, residual=res)
    for cfg in _split_of(n, device):
        y, h, _ = _launch(x, w, cfg, residual=res)
        assert torch.equal(h, (x.double() + res.double()).to(dtype)), f"h with {cfg}"
        assert_close(y, want_y, dtype, f"y with {cfg}")
        assert_close(h, want_h, dtype, f"h with {cfg}")


def test_split_strided_rows_and_weight_view(device):
    """Rows with a row stride wider than N and a weight read with its own stride."""
    n = 400
    big = torch.randn(7, 1000, device=device)
    x = big[:, 100 : 100 + n]
    wbig = torch.randn(n, 3, device=device)
    w = wbig[:, 1]  # stride 3
    for cfg in _split_of(n, device):
        y, _, _ = _launch(x, w, cfg)
        assert_close(y, oracle_y(x, w), torch.float32, f"y with {cfg}")


def test_split_inference_skips_rstd(device):
    x = torch.randn(3, 260, device=device)
    w = torch.randn(260, device=device)
    y, _, rstd = _launch(x, w, _split_of(260, device)[-1], keep_rstd=False)
    assert rstd is None
    assert_close(y, oracle_y(x, w), torch.float32, "y without rstd")


def test_split_config_is_checked(device):
    """Bad split configs are refused by field name, before any output is written."""
    x = torch.randn(4, 300, device=device)
    w = torch.randn(300, device=device)
    cases = [
        (ForwardConfig(128, 0, 4, split=2), "split \\* block >= N = 300"),
        (ForwardConfig(512, 2, 4, split=1), "rows == 0"),
        (ForwardConfig(512, 0, 4, split=-1), "split must be >= 0"),
        (ForwardConfig(512, 0, 4, split=1, pdl=True), "takes none of pdl"),
        (ForwardConfig(512, 0, 4, split=1, stages=2, evict_last=True), "takes none of evict_last"),
        (ForwardConfig(512, 0, 4, split=1, stages=0), "stages must be >= 1"),
        # bf16 rows and residual, 7 chunks of 16384 each in shared memory: 458752 bytes
        (ForwardConfig(16384, 0, 4, split=1, stages=8), "x and the residual in shared memory"),
    ]
    if device == "cpu":
        cases.append((ForwardConfig(256, 0, 4, split=2), "needs compiled kernels on a GPU"))
    else:
        sms = config.SPLIT_PROGRAMS_PER_SM * config.sm_count(x.get_device())
        cases.append((ForwardConfig(512, 0, 4, split=sms + 1), "programs this GPU keeps"))
    res = torch.randn(4, 300, device=device)
    for cfg, match in cases:
        with pytest.raises(ContractValueError, match=match):
            _launch(x.to(BF16), w.to(BF16), cfg, residual=res.to(BF16))


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 3, 4])
def test_split_wide_rows_and_graph_replay(stages):
    """Rows of 131072 columns over 8 programs, more rows than the grid: eager, then captured in
    a CUDA graph and replayed twice (the graph's counters are its own), the same bits each way;
    through autograd with the heuristic's config the gradient matches the oracle."""
    x = torch.randn(70, 131072 - 5, device="cuda").to(BF16)
    w = (1 + 0.5 * torch.randn(x.shape[1], device="cuda")).to(BF16)
    cfg = ForwardConfig(16384, 0, 8, split=8, stages=stages)
    y, _, rstd = _launch(x, w, cfg)
    assert_close(y, oracle_y(x, w), BF16, "y, 131067 columns over 8 programs")
    _counters_whole(x, 8)
    assert_graph_replays(lambda: _launch(x, w, cfg), (y, None, rstd), str(cfg))
    _counters_whole(x, 8)


@pytest.mark.gpu
def test_heuristic_split_forward_through_autograd():
    """Whatever forward the heuristic takes at the widest rows, the gradients match the oracle."""
    n = 262144
    x = torch.randn(3, n, device="cuda").to(BF16).requires_grad_()
    w = (1 + 0.5 * torch.randn(n, device="cuda")).to(BF16).requires_grad_()
    y = rk.rmsnorm(x, w, EPS)
    dy = torch.randn_like(y)
    y.backward(dy)
    want_y, _, want_dx, want_dw, _ = oracle(x, w, dy, EPS)
    assert_close(y, want_y, BF16, "y")
    assert_close(x.grad, want_dx, BF16, "dx")
    assert_close(w.grad.float(), want_dw.float(), BF16, "dw")


def test_split_task_count_must_fit_int32():
    """The kernel's task indices are int32, two grid steps past the last task included: a
    launch that would overflow them is refused by name (no tensor that large is needed here)."""
    config.check_split_tasks(1000, 16, 128)
    config.check_split_tasks(2**31 - 1 - 256, 1, 128)
    with pytest.raises(ContractValueError, match="M \\* split must stay below 2\\*\\*31"):
        config.check_split_tasks(2**31 // 16, 16, 128)
    with pytest.raises(ContractValueError, match="M \\* split"):
        config.check_split_tasks(2**31 - 1 - 255, 1, 128)
    # the staged kernel's pipeliner indexes stages - 1 steps ahead
    config.check_split_tasks(2**31 - 1 - 512, 1, 128, ahead=4)
    with pytest.raises(ContractValueError, match="2\\*\\*31 - 4 \\* programs"):
        config.check_split_tasks(2**31 - 1 - 511, 1, 128, ahead=4)


class _Refusing:
    """Stands in for ops.FORWARD_SPLIT: refuses cooperative grids wider than ``most`` programs
    as the driver does (nothing runs), launches the others through ``real`` (if any)."""

    def __init__(self, most, real=None):
        self.most, self.real, self.grids = most, real, []

    def launch(self, grid, *args, **kwargs):
        self.grids.append(grid[0])
        if grid[0] > self.most:
            raise RuntimeError("Triton Error [CUDA]: too many blocks in cooperative launch")
        if self.real is not None:
            self.real.launch(grid, *args, **kwargs)


class _Failing:
    def launch(self, *args, **kwargs):
        raise RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered")


@pytest.fixture
def no_cap(monkeypatch):
    monkeypatch.setattr(config, "SPLIT_GRID_CAP", {})
    yield
    config.forward_config.cache_clear()


def test_a_refused_grid_is_halved_and_capped(no_cap, caplog):
    """A context that keeps fewer programs resident than the SMs say (MPS): the grid is halved
    until the driver takes it, the device's cap kept and logged; not even one row's programs:
    False, nothing launched. Any other launch error is raised as it is."""
    refusing = _Refusing(most=40)
    with caplog.at_level("WARNING", logger="rmsnorm_kernel"):
        assert ops._launch_split(refusing, 128, 8, (), (), (), 8, 7)
    assert refusing.grids == [128, 64, 32]
    assert config.SPLIT_GRID_CAP[7] == 32
    assert "launching 64 instead" in caplog.text and "launching 32 instead" in caplog.text
    tight = _Refusing(most=4)
    assert not ops._launch_split(tight, 8, 8, (), (), (), 8, 7)
    assert tight.grids == [8] and config.SPLIT_GRID_CAP[7] == 4
    with pytest.raises(RuntimeError, match="illegal memory access"):
        ops._launch_split(_Failing(), 128, 8, (), (), (), 8, 7)


@pytest.mark.parametrize("stages", [1, 3])
def test_an_explicit_split_no_context_can_hold_is_refused_by_name(
    no_cap, monkeypatch, device, stages
):
    x = torch.randn(3, 300, device=device)
    monkeypatch.setattr(ops, "FORWARD_SPLIT", _Refusing(most=0))
    monkeypatch.setattr(ops, "FORWARD_SPLIT_STAGED", _Refusing(most=0))
    with pytest.raises(ContractValueError, match="split=1: this GPU context cannot keep"):
        _launch(x, None, ForwardConfig(512, 0, 4, split=1, stages=stages))


def test_the_heuristic_takes_another_config_when_split_cannot_launch(
    no_cap, monkeypatch, device, caplog
):
    """The heuristic's split config refused even at one row's programs: the heuristic, which
    now sees the device's cap, is asked again (here: the one-row kernel), and that is logged."""
    x = torch.randn(3, 300, device=device)
    w = torch.randn(300, device=device)
    configs = iter([ForwardConfig(512, 0, 4, split=1), ForwardConfig(512, 0, 4)])
    monkeypatch.setattr(ops, "_heuristic_forward", lambda *args: next(configs))
    monkeypatch.setattr(ops, "FORWARD_SPLIT", _Refusing(most=0))
    with caplog.at_level("WARNING", logger="rmsnorm_kernel"):
        y, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, x.dtype)
    assert_close(y, oracle_y(x, w), torch.float32, "y after the refused split")
    assert rstd.shape == (3,) and "cannot be resident" in caplog.text


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 3])
def test_a_grid_wider_than_the_gpu_holds_is_halved_on_the_gpu(no_cap, monkeypatch, stages):
    """On a real GPU: with the SM count doubled the first cooperative grid (two programs per SM
    at ~175-255 registers) is refused by the driver; the halved one runs, the same bits as
    before."""
    x = torch.randn(300, 131072, device="cuda").to(BF16)
    w = (1 + 0.5 * torch.randn(131072, device="cuda")).to(BF16)
    cfg = ForwardConfig(16384, 0, 8, split=8, stages=stages)
    y, _, rstd = _launch(x, w, cfg)
    sms = config.sm_count(0)
    monkeypatch.setattr(config, "sm_count", lambda index: 2 * sms)
    y2, _, rstd2 = _launch(x, w, cfg)
    assert torch.equal(y, y2) and torch.equal(rstd, rstd2)
    assert config.SPLIT_GRID_CAP[0] <= sms

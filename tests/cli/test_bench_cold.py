"""bench's ``graph_cold`` mode: the input sets it cycles over (sized by the bytes one set takes,
each set its own memory), its config rules, and a whole run with it on the CPU (stand-in
timers); on a GPU, the real timer."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import read_json, run_cli
from test_bench import _run, _small, needs_interpreter

from rmsnorm_kernel.cli.bench import measure
from rmsnorm_kernel.cli.bench.timers import MAX_COLD_SETS, CudaTimers, cold_sets


class _Counter:
    """A stand-in for ``torch.cuda.memory_allocated``: each ``make()`` adds ``per_set``."""

    def __init__(self, per_set: int):
        self.total, self.per_set, self.live = 0, per_set, []

    def allocated(self) -> int:
        return self.total

    def make(self):
        self.total += self.per_set
        return lambda: None


@pytest.mark.parametrize(
    "per_set,cold_bytes,sets",
    [(100, 250, 3), (100, 300, 3), (100, 301, 4), (1 << 30, 256 << 20, 2), (1, 1 << 40, None)],
)
def test_cold_sets_span_at_least_the_bytes_within_the_bound(per_set, cold_bytes, sets):
    c = _Counter(per_set)
    assert cold_sets(c.make, cold_bytes, c.allocated) == (MAX_COLD_SETS if sets is None else sets)


def test_cold_sets_refuse_a_make_that_allocates_nothing():
    c = _Counter(0)
    with pytest.raises(RuntimeError, match="allocated no memory"):
        cold_sets(c.make, 1 << 20, c.allocated)


@pytest.mark.parametrize("pass_", ["forward", "forward_backward"])
def test_each_cold_set_reads_its_own_inputs(pass_):
    inputs = measure.make_inputs(measure.Shape(4, 8, "float32"), "cpu", seed=0)
    seen = []

    def f(x, w):
        seen.append((x.data_ptr(), w.data_ptr()))
        return x * w

    for cold in (False, True):
        make = measure.maker(f, inputs, pass_, forward_requires_grad=False, cold=cold)
        seen.clear()
        a, b = make(), make()  # both alive, as graph_cold holds its sets
        a(), b()
        assert seen[0][0] != seen[1][0] and seen[0][1] != seen[1][1]  # fresh leaves either way
    if pass_ == "forward_backward":  # dy: shared when warm, a copy per set when cold
        calls = []
        real_grad = torch.autograd.grad

        def grad(out, inp, dy):
            calls.append(dy.data_ptr())
            return real_grad(out, inp, dy)

        torch.autograd.grad = grad
        try:
            for cold in (False, True):
                make = measure.maker(f, inputs, pass_, forward_requires_grad=False, cold=cold)
                calls.clear()
                a, b = make(), make()
                a(), b()
                assert (calls[0] != calls[1]) is cold
                assert (calls[0] == inputs.dy.data_ptr()) is not cold
        finally:
            torch.autograd.grad = real_grad


@pytest.mark.parametrize(
    "override,message",
    [
        ("benchmark.timing.graph_cold.cold_bytes=0", "benchmark.timing.graph_cold.cold_bytes"),
        ("~benchmark.timing.graph_cold.cold_bytes", "benchmark.timing.graph_cold must give"),
    ],
)
def test_graph_cold_config_is_checked_before_output(tmp_path, capsys, override, message):
    out_dir = tmp_path / "bench"
    modes = "benchmark.modes=[graph,graph_cold]"
    assert run_cli("bench", modes, override, f"benchmark.out_dir={out_dir}") == 2
    assert message in capsys.readouterr().err
    assert not out_dir.exists()


@needs_interpreter
def test_whole_run_with_graph_cold(tmp_path):
    cfg = _small(tmp_path, modes=["graph", "graph_cold"])
    cfg["curves"]["enabled"] = cfg["host"]["enabled"] = False
    code, text = _run(cfg)
    assert code == 0, text
    payload = read_json(tmp_path / "bench.json")
    assert set(payload["copy_ceiling"]) == {"graph", "graph_cold"}
    cold = [g for g in payload["groups"] if g["mode"] == "graph_cold"]
    assert len(cold) == 2 * 2  # two shapes, two passes
    for g in cold:
        assert g["results"]["ours"]["status"] == "ok" and g["results"]["ours"]["us"] > 0
        assert len(g["results"]["ours"]["us_rounds"]) == cfg["timing"]["graph_cold"]["rounds"]
    assert "cold inputs" in text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_cold_on_gpu_cycles_over_sets_beyond_l2():
    from rmsnorm_kernel import rms_norm

    timing = {
        "warmup_calls": 2,
        "target_ms": 1,
        "max_calls": 50,
        "replays": 3,
        "rounds": 1,
        "cold_bytes": 64 << 20,
    }
    timers = CudaTimers({"graph": dict(timing), "graph_cold": timing})
    inputs = measure.make_inputs(measure.Shape(1024, 4096, "bfloat16"), "cuda", seed=0)
    make = measure.maker(
        lambda x, w: rms_norm(x, (4096,), w, 1e-6), inputs, "forward_backward", False, cold=True
    )
    # 1024 x 4096 bf16: x and dy 8 MiB each, so 64 MiB takes 4 sets
    assert cold_sets(make, timing["cold_bytes"], torch.cuda.memory_allocated) == 4
    warm, cold = timers.graph(make), timers.graph_cold(make)
    assert warm > 0 and cold > 0

"""CUDA timers for ``bench``: one per mode, plus host cost and peak memory.

Every timer takes a *maker*, ``make() -> call``: ``make`` creates fresh leaf tensors and returns
``call()``, one pass on them. Fresh leaves matter for CUDA graphs: capturing on leaves that eager
calls used while their autograd graph is still alive makes the capture fail (seen with
F.rms_norm too), so each capture gets leaves no eager call has touched.

All times are microseconds per call.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

Make = Callable[[], Callable[[], object]]


def _events() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


#: Most input sets ``graph_cold`` cycles over: a bound on the captured graph (one call per set at
#: least). The tutorial's 128 x 257 float32 inputs take ~132 KiB a set, so 256 MiB needs ~2000.
MAX_COLD_SETS = 4096


def cold_sets(make: Make, cold_bytes: int, allocated: Callable[[], int]) -> int:
    """How many input sets (one ``make()``'s fresh copies each, measured by the ``allocated()``
    bytes one ``make()`` adds) span at least ``cold_bytes``, within 2..MAX_COLD_SETS: two at
    least, so no call reads the inputs of the call before it even where one set is larger."""
    before = allocated()
    call = make()
    per_set = allocated() - before
    del call
    if per_set <= 0:
        raise RuntimeError("graph_cold: one make() allocated no memory, so no set size to cycle")
    return max(2, min(MAX_COLD_SETS, -(-cold_bytes // per_set)))


def _replay_us(make: Make, calls: int, replays: int, sets: int = 1) -> float:
    """Capture ``calls`` calls in one CUDA graph, call ``i`` on the ``i % sets``-th of ``sets``
    input sets (fresh leaves each); median of ``replays`` replays."""
    sets_calls = [make() for _ in range(sets)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            sets_calls[i % sets]()
    graph.replay()  # the first replay uploads the graph: not timed
    torch.cuda.synchronize()
    start, end = _events()
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    del graph, sets_calls
    return statistics.median(times)


class CudaTimers:
    """``timing``: the validated ``benchmark.timing`` (see :mod:`rmsnorm_kernel.cli.bench.plan`)."""

    def __init__(self, timing: dict):
        self.timing = timing

    def time(self, mode: str, make: Make) -> float:
        return getattr(self, mode)(make)

    def graph(self, make: Make) -> float:
        """GPU time of the kernels alone: CUDA-graph replay, no host work between calls.

        Eager warm-up on a side stream first (compilation and caches must not happen during
        capture), then a 3-call graph measures one call, which sizes the timed graph to about
        ``target_ms`` (at most ``max_calls`` calls).
        """
        return self._graph(make, self.timing["graph"], sets=1)

    def graph_cold(self, make: Make) -> float:
        """:meth:`graph` with cold inputs: the graph cycles over input sets spanning at least
        ``cold_bytes`` (:func:`cold_sets`), so no call finds its inputs in L2 from the call
        before, as a model's norm sees a new x each call. One call per set at least, beyond
        ``max_calls`` where the sets are more."""
        t = self.timing["graph_cold"]
        return self._graph(make, t, cold_sets(make, t["cold_bytes"], torch.cuda.memory_allocated))

    def _graph(self, make: Make, t: dict, sets: int) -> float:
        call = make()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(t["warmup_calls"]):
                call()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        del call
        probe = min(3, t["max_calls"])
        per_call = _replay_us(make, probe, replays=2, sets=min(sets, probe))
        calls = max(1, min(t["max_calls"], math.ceil(t["target_ms"] * 1e3 / max(per_call, 1e-3))))
        return _replay_us(make, max(calls, sets), t["replays"], sets)

    def end_to_end(self, make: Make) -> float:
        """``triton.testing.do_bench`` median: L2 flushed before each call, host cost included
        wherever the host is slower than the GPU."""
        import triton.testing

        t = self.timing["end_to_end"]
        call = make()
        ms = triton.testing.do_bench(
            call, warmup=t["warmup_ms"], rep=t["rep_ms"], return_mode="median"
        )
        return ms * 1e3

    def tutorial(self, make: Make) -> float:
        """The tutorial's protocol: CUDA events around ``calls_per_sample`` whole calls after
        ``warmup_calls``; the median sample divided by the calls."""
        t = self.timing["tutorial"]
        call = make()
        for _ in range(t["warmup_calls"]):
            call()
        torch.cuda.synchronize()
        start, end = _events()
        samples = []
        for _ in range(t["samples"]):
            start.record()
            for _ in range(t["calls_per_sample"]):
                call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / t["calls_per_sample"])
        return statistics.median(samples)

    def host(self, make: Make, calls: int, warmup_calls: int) -> float:
        """Host time per call: ``calls`` eager calls synchronised only at the end. On a shape whose
        kernels take a few microseconds the GPU never holds the loop back."""
        call = make()
        for _ in range(warmup_calls):
            call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / calls * 1e6

    def peak_bytes(self, make: Make) -> int:
        """Bytes allocated at the peak of one call beyond what was allocated before it (the
        call's outputs included). One call first, so compilation and caches stay outside."""
        call = make()
        call()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = call()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del out
        return int(peak)

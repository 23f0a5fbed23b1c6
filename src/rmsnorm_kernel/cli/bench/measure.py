"""Run a :class:`~rmsnorm_kernel.cli.bench.plan.Plan`: every implementation, shape, pass and mode.

The timers are passed in (``CudaTimers`` on a GPU; tests pass fakes), so everything here except
the timers' own work runs anywhere. One implementation failing on one shape is recorded as
``"fails: <reason>"`` in that cell and the run goes on.

Output: a list of *groups*, one per (section, shape, pass, mode), each
``{"section", "m", "n", "dtype", "pass", "mode", "bytes", "results": {impl: {...}}}`` with ratios
added by :mod:`rmsnorm_kernel.cli.bench.compare`. Sections: ``table`` (the shape table),
``host`` (host cost), ``curve_n`` / ``curve_m`` (bandwidth curves). Modes beyond the timers':
``memory`` (peak bytes of one call) and ``error`` (forward max |y - float64 oracle|).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rmsnorm_kernel.cli.bench import peers
from rmsnorm_kernel.cli.bench.compare import add_ratios, gb_per_s, summarise_timing, traffic_bytes
from rmsnorm_kernel.cli.bench.plan import Plan, Shape
from rmsnorm_kernel.cli.common import DTYPES

Forward = peers.Forward


@dataclass
class Inputs:
    x: torch.Tensor  # (M, N), the shape's dtype
    w: torch.Tensor  # (N,), x's dtype
    dy: torch.Tensor  # (M, N), x's dtype


def make_inputs(shape: Shape, device, seed: int) -> Inputs:
    """Random inputs drawn on ``device`` (a CPU draw of 2^28 values would take seconds)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = DTYPES[shape.dtype]
    x = torch.randn(shape.m, shape.n, device=device, dtype=dtype, generator=g)
    w = (1 + 0.1 * torch.randn(shape.n, device=device, generator=g)).to(dtype)
    dy = torch.randn(shape.m, shape.n, device=device, dtype=dtype, generator=g)
    return Inputs(x, w, dy)


def maker(f: Forward, inputs: Inputs, pass_: str, forward_requires_grad: bool, cold=False):
    """``make() -> call`` for the timers: fresh leaves on every ``make()``; ``cold``: a fresh
    copy of dy too (``graph_cold`` cycles over ``make()``'s sets: each must be its own memory)."""
    grad = pass_ == "forward_backward" or forward_requires_grad

    def make():
        x = inputs.x.clone().requires_grad_(grad)
        w = inputs.w.clone().requires_grad_(grad)
        if pass_ == "forward":
            return lambda: f(x, w)
        dy = inputs.dy.clone() if cold else inputs.dy
        return lambda: torch.autograd.grad(f(x, w), (x, w), dy)

    return make


def copy_maker(nbytes: int, device):
    """The copy ceiling's call: one elementwise kernel copying ``nbytes`` (bytes moved: 2 x).

    A kernel, not ``dst.copy_(src)``: inside a CUDA graph a plain copy becomes a memcpy node,
    which the H200 ran at 2767 GB/s against 4209 GB/s eager, so the graph-mode ceiling came out
    below what the norms themselves reached. ``neg`` reads and writes each byte once, on the SMs
    in both modes, like the kernels it is compared with.
    """

    def make():
        src = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=device)
        dst = torch.empty_like(src)
        return lambda: torch.neg(src, out=dst)

    return make


def _failure(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"fails: {type(exc).__name__}: {text[:200]}"


def _settle(device) -> None:
    """After a failure: wait for the device and give cached blocks back (a failed capture or an
    out-of-memory error must not starve the next implementation)."""
    if torch.device(device).type == "cuda":
        try:
            torch.cuda.synchronize()
        finally:
            torch.cuda.empty_cache()


def attempt(run: Callable[[], object], device) -> dict:
    """``{"status": "ok", "value": ...}`` or ``{"status": "fails: ..."}``."""
    try:
        return {"status": "ok", "value": run()}
    except Exception as exc:  # one implementation failing one shape is a result
        status = _failure(exc)
        try:
            _settle(device)
        except Exception as again:  # a broken context: every later cell will say so too
            status += f" (then {_failure(again)})"
        return {"status": status}


class Runner:
    def __init__(self, plan: Plan, timers, device, log: Callable[[str], None] = print):
        self.plan, self.timers, self.device, self.log = plan, timers, device, log
        self.impls: dict[str, Forward | str] = peers.build(plan.implementations, plan.eps)
        self.copy: dict[str, dict] = {}
        self.groups: list[dict] = []

    # -- pieces --------------------------------------------------------------------------------
    def peers_info(self) -> dict:
        out = {}
        for name, f in self.impls.items():
            p = peers.PEERS[name]
            out[name] = {
                "label": p.label,
                "notes": p.notes,
                "version": p.version(),
                "status": "ok" if callable(f) else f,
            }
        return out

    def copy_ceiling(self, modes: Sequence[str]) -> None:
        nbytes = self.plan.copy_bytes
        for mode in modes:
            make = copy_maker(nbytes, self.device)
            r = attempt(lambda mode=mode, make=make: self.timers.time(mode, make), self.device)
            entry = {"mode": mode, "bytes": 2 * nbytes, "status": r["status"]}
            if r["status"] == "ok":
                entry["us"] = r["value"]
                entry["gb_per_s"] = gb_per_s(2 * nbytes, r["value"])
            self.copy[mode] = entry
            self.log(
                f"copy ceiling ({mode}): "
                + (f"{entry['gb_per_s']:.0f} GB/s" if "gb_per_s" in entry else entry["status"])
            )

    def _cell(self, name: str, key: str, run: Callable, *args) -> dict:
        """``{"status": "ok", key: run(*args)}``, or the implementation's status, or its failure."""
        if not callable(self.impls[name]):
            return {"status": self.impls[name]}
        r = attempt(lambda: run(*args), self.device)
        return {"status": r["status"], key: r["value"]} if r["status"] == "ok" else r

    def _rounds(self, rounds: int, time_one: Callable, keep: Callable) -> dict:
        """Each implementation's cell from ``rounds`` interleaved rounds: each round times every
        implementation once (``time_one(name, f)`` -> a cell), starting one further along each
        round, so that no implementation is always timed first; ``keep`` (median, min) of its
        rounds is its ``us``, every round in ``us_rounds`` when there are several. An
        implementation that fails (or is not callable) keeps that cell and is not timed again."""
        names = list(self.impls)
        failed: dict[str, dict] = {}
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if name in failed:
                    continue
                cell = time_one(name, self.impls[name])
                if cell["status"] == "ok":
                    times[name].append(cell["us"])
                else:
                    failed[name] = cell
        results = {}
        for name in names:
            if name in failed:
                results[name] = failed[name]
                continue
            results[name] = {"status": "ok", "us": keep(times[name])}
            if rounds > 1:
                results[name]["us_rounds"] = times[name]
        return results

    def host(self) -> None:
        """Host cost per call of each pass at the host shape (forward timed as in training:
        inputs that require grad, so autograd records the graph). ``rounds`` interleaved rounds:
        each times every implementation once, starting one further along each round (no
        implementation always first); the median round is kept, every round in ``us_rounds``."""
        h = self.plan.host
        inputs = make_inputs(h["shape"], self.device, self.plan.seed)
        for pass_ in self.plan.passes:
            results = self._rounds(
                h["rounds"],
                lambda name, f, pass_=pass_: self._cell(
                    name,
                    "us",
                    self.timers.host,
                    maker(f, inputs, pass_, True) if callable(f) else None,
                    h["calls"],
                    h["warmup_calls"],
                ),
                statistics.median,
            )
            group = self._group("host", h["shape"], pass_, "host", results)
            group["calls"] = h["calls"]
            group["rounds"] = h["rounds"]
            add_ratios(group, self.plan.ours, "us")
            self.log(self._line(group))

    def _group(self, section: str, shape: Shape, pass_: str, mode: str, results: dict) -> dict:
        size = DTYPES[shape.dtype].itemsize
        group = {
            "section": section,
            "m": shape.m,
            "n": shape.n,
            "dtype": shape.dtype,
            "pass": pass_,
            "mode": mode,
            "bytes": traffic_bytes(shape.m, shape.n, size, pass_),
            "results": results,
        }
        self.groups.append(group)
        return group

    def errors(self, shape: Shape, inputs: Inputs) -> None:
        """Forward max |y - float64 oracle| of every implementation: all compute one function."""
        from rmsnorm_kernel.reference import rmsnorm_reference

        with torch.no_grad():
            oracle = rmsnorm_reference(inputs.x.double(), inputs.w.double(), self.plan.eps)
            results = {}
            for name, f in self.impls.items():
                run = lambda f=f, o=oracle: float((f(inputs.x, inputs.w).double() - o).abs().max())
                results[name] = self._cell(name, "max_abs_err", run)
        del oracle
        self._group("table", shape, "forward", "error", results)

    def memory(self, shape: Shape, inputs: Inputs, pass_: str) -> None:
        results = {}
        for name, f in self.impls.items():
            make = maker(f, inputs, pass_, self.plan.forward_requires_grad) if callable(f) else None
            results[name] = self._cell(name, "peak_bytes", self.timers.peak_bytes, make)
        add_ratios(
            self._group("table", shape, pass_, "memory", results), self.plan.ours, "peak_bytes"
        )

    def timing(self, section: str, shape: Shape, inputs: Inputs, pass_: str, mode: str) -> dict:
        """One group: every implementation timed in ``mode``. Graph mode takes the fastest of
        ``timing.graph.rounds`` interleaved, rotated rounds: the same kernels took up to 12%
        longer when timed first at a shape than after the compile peer (H100, 4096 x 4096 bf16
        forward 24.5 us against 21.7 for ours; ``experiments/kernel_perf/README.md``,
        forty-seventh session: the caching allocator's state after a graph timing, forty-eighth),
        and ours came first at every shape."""
        grad = self.plan.forward_requires_grad
        results = self._rounds(
            self.plan.timing[mode].get("rounds", 1),
            lambda name, f: self._cell(
                name,
                "us",
                self.timers.time,
                mode,
                maker(f, inputs, pass_, grad, mode == "graph_cold") if callable(f) else None,
            ),
            min,
        )
        group = self._group(section, shape, pass_, mode, results)
        copy = self.copy.get(mode, {}).get("gb_per_s")
        summarise_timing(group, self.plan.ours, copy)
        self.log(self._line(group))
        return group

    # -- sections ------------------------------------------------------------------------------
    def shapes(self, section: str, shapes: Sequence[Shape], passes, modes, extras: bool) -> None:
        for i, shape in enumerate(shapes, 1):
            start = time.perf_counter()
            # A fresh Dynamo cache per shape: past its recompile limit Dynamo runs the compiled
            # peer eagerly without saying so.
            torch._dynamo.reset()
            inputs = make_inputs(shape, self.device, self.plan.seed)
            if extras:
                self.errors(shape, inputs)
            for pass_ in passes:
                if extras and self.plan.memory:
                    self.memory(shape, inputs, pass_)
                for mode in modes:
                    self.timing(section, shape, inputs, pass_, mode)
            del inputs
            if torch.device(self.device).type == "cuda":
                torch.cuda.empty_cache()
            self.log(
                f"[{section} {i}/{len(shapes)}] {shape.label}: {time.perf_counter() - start:.1f} s"
            )

    def run(self) -> None:
        plan = self.plan
        self.copy_ceiling(tuple(dict.fromkeys(plan.modes + plan.curve_modes)))
        if plan.host is not None:
            self.host()
        self.shapes("table", plan.shapes, plan.passes, plan.modes, extras=True)
        for curve in plan.curves:
            self.shapes(
                f"curve_{curve.name}",
                curve.shapes,
                plan.curve_passes,
                plan.curve_modes,
                extras=False,
            )

    @staticmethod
    def _line(group: dict) -> str:
        cells = []
        for name, r in group["results"].items():
            cells.append(f"{name} {r['us']:.1f}" if r["status"] == "ok" else f"{name} -")
        return (
            f"  {group['m']}x{group['n']} {group['dtype']} {group['pass']} {group['mode']} "
            f"(us): " + ", ".join(cells)
        )

    def ours_failures(self) -> list[str]:
        """Cells where ours did not run: the only failures that fail the command."""
        out = []
        for g in self.groups:
            r = g["results"].get(self.plan.ours)
            if r is not None and r["status"] != "ok":
                out.append(
                    f"{g['section']} {g['m']}x{g['n']} {g['dtype']} {g['pass']} "
                    f"{g['mode']}: {r['status']}"
                )
        return out

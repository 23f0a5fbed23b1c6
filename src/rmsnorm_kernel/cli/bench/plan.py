"""What one ``bench`` run measures, read from ``conf/benchmark`` and checked before any GPU work.

Vocabulary (used in the JSON, the tables and the figures):

- *pass*: ``forward`` (``y = f(x, w)``) or ``forward_backward`` (that, then
  ``torch.autograd.grad(y, (x, w), dy)``).
- *mode*: how a pass is timed. ``graph`` replays a CUDA graph of many calls (GPU time of the
  kernels only; the fastest of ``timing.graph.rounds`` rounds, the implementations' order
  rotated each round); ``graph_cold`` is the same with inputs that no call finds in L2 (the
  graph cycles over copies of x, w and dy spanning at least ``timing.graph_cold.cold_bytes``,
  as a model's norm sees a new x each call); ``end_to_end`` is ``triton.testing.do_bench``'s
  median (host overhead included when the host is slower than the GPU); ``tutorial`` is the
  tutorial's protocol (CUDA events around whole calls, 20 warm-up calls, median of 50 samples of
  20 calls).
- *shape*: ``M x N`` rows of ``dtype``; the weight has x's dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rmsnorm_kernel.cli.bench.peers import PEERS
from rmsnorm_kernel.cli.common import DTYPES, SHORT
from rmsnorm_kernel.cli.validate import ConfigError, choice, count, number

PASSES = ("forward", "forward_backward")
MODES = ("graph", "graph_cold", "end_to_end", "tutorial")


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    dtype: str

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n} {SHORT[self.dtype]}"


@dataclass(frozen=True)
class Curve:
    name: str  # "n" (bandwidth against N at fixed M*N) or "m" (against M at fixed N)
    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class Plan:
    out_dir: str
    eps: float
    seed: int
    ours: str
    implementations: tuple[str, ...]
    passes: tuple[str, ...]
    modes: tuple[str, ...]
    forward_requires_grad: bool
    timing: dict
    copy_bytes: int
    shapes: tuple[Shape, ...]
    memory: bool
    host: dict | None  # {shape, calls, warmup_calls, rounds}, or None when off
    curves: tuple[Curve, ...] = field(default=())
    curve_modes: tuple[str, ...] = ()
    curve_passes: tuple[str, ...] = ()


def _shape(entry, key: str) -> Shape:
    if not isinstance(entry, Mapping) or set(entry) != {"m", "n", "dtype"}:
        raise ConfigError(f"{key} must be {{m, n, dtype}} (got {entry!r})")
    return Shape(
        count(entry["m"], f"{key}.m"),
        count(entry["n"], f"{key}.n"),
        choice(entry["dtype"], f"{key}.dtype", DTYPES),
    )


def _names(values, key: str, allowed) -> tuple[str, ...]:
    values = list(values)
    if not values:
        raise ConfigError(f"{key} must not be empty")
    for i, v in enumerate(values):
        choice(v, f"{key}[{i}]", allowed)
    return tuple(values)


def _timing(cfg: Mapping, modes) -> dict:
    key = "benchmark.timing"
    graph = {"warmup_calls": 1, "target_ms": 0, "max_calls": 1, "replays": 1, "rounds": 1}
    spec = {
        "graph": graph,
        "graph_cold": {**graph, "cold_bytes": 1},
        "end_to_end": {"warmup_ms": 0, "rep_ms": 0},
        "tutorial": {"warmup_calls": 0, "samples": 1, "calls_per_sample": 1},
    }
    out = {}
    for mode in modes:
        entry = cfg.get(mode)
        if not isinstance(entry, Mapping) or set(entry) != set(spec[mode]):
            raise ConfigError(f"{key}.{mode} must give {sorted(spec[mode])} (got {entry!r})")
        out[mode] = {}
        for k, minimum in spec[mode].items():
            if k.endswith("_ms"):
                out[mode][k] = number(entry[k], f"{key}.{mode}.{k}", strict=True)
            else:
                out[mode][k] = count(entry[k], f"{key}.{mode}.{k}", minimum=minimum)
    return out


def curve_n(elements: int, values, dtype: str) -> Curve:
    """Bandwidth against N at a fixed element count: ``M = elements / N`` for each N."""
    shapes = []
    for i, n in enumerate(values):
        n = count(n, f"benchmark.curves.n.values[{i}]")
        if elements % n:
            raise ConfigError(
                f"benchmark.curves.n.values[{i}] must divide benchmark.curves.n.elements "
                f"({elements}) so M * N stays fixed (got {n})"
            )
        shapes.append(Shape(elements // n, n, dtype))
    return Curve("n", tuple(shapes))


def curve_m(n: int, values, dtype: str) -> Curve:
    """Bandwidth against M at a fixed N."""
    return Curve(
        "m",
        tuple(
            Shape(count(m, f"benchmark.curves.m.values[{i}]"), n, dtype)
            for i, m in enumerate(values)
        ),
    )


def read_plan(cfg: Mapping) -> Plan:
    """A :class:`Plan` from ``cfg.benchmark``; :class:`ConfigError` names any bad key."""
    key = "benchmark"
    implementations = _names(cfg["implementations"], f"{key}.implementations", PEERS)
    ours = choice(cfg["ours"], f"{key}.ours", implementations)
    modes = _names(cfg["modes"], f"{key}.modes", MODES)
    passes = _names(cfg["passes"], f"{key}.passes", PASSES)
    shapes = tuple(_shape(s, f"{key}.shapes[{i}]") for i, s in enumerate(cfg["shapes"]))
    if not shapes:
        raise ConfigError(f"{key}.shapes must not be empty")
    host = None
    if cfg["host"]["enabled"]:
        host = {
            "shape": _shape(cfg["host"]["shape"], f"{key}.host.shape"),
            "calls": count(cfg["host"]["calls"], f"{key}.host.calls"),
            "warmup_calls": count(cfg["host"]["warmup_calls"], f"{key}.host.warmup_calls"),
            "rounds": count(cfg["host"]["rounds"], f"{key}.host.rounds"),
        }
    curves: tuple[Curve, ...] = ()
    curve_modes: tuple[str, ...] = ()
    curve_passes: tuple[str, ...] = ()
    c = cfg["curves"]
    if c["enabled"]:
        dtype = choice(c["dtype"], f"{key}.curves.dtype", DTYPES)
        elements = count(c["n"]["elements"], f"{key}.curves.n.elements")
        curves = (
            curve_n(elements, c["n"]["values"], dtype),
            curve_m(count(c["m"]["n"], f"{key}.curves.m.n"), c["m"]["values"], dtype),
        )
        curve_modes = _names(c["modes"], f"{key}.curves.modes", MODES)
        curve_passes = _names(c["passes"], f"{key}.curves.passes", PASSES)
    all_modes = tuple(dict.fromkeys(modes + curve_modes))
    return Plan(
        out_dir=str(cfg["out_dir"]),
        eps=number(cfg["eps"], f"{key}.eps", strict=True),
        seed=count(cfg["seed"], f"{key}.seed", minimum=0),
        ours=ours,
        implementations=implementations,
        passes=passes,
        modes=modes,
        forward_requires_grad=bool(cfg["forward_requires_grad"]),
        timing=_timing(cfg["timing"], all_modes),
        copy_bytes=count(cfg["copy_bytes"], f"{key}.copy_bytes"),
        shapes=shapes,
        memory=bool(cfg["memory"]),
        host=host,
        curves=curves,
        curve_modes=curve_modes,
        curve_passes=curve_passes,
    )

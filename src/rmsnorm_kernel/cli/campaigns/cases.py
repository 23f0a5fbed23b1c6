"""Campaign cases: which shapes, dtypes and options a check campaign runs, and their inputs.

A *grid* is a list of blocks; a block maps axes to lists of values and contributes the product of
those lists. Axes (defaults in brackets):

- ``m``: rows (leading size); ``n``: the row width N (last dim).
- ``dtype``: dtype of ``x`` (float32, float16, bfloat16, float64).
- ``inputs``: ``unit`` (x ~ N(0,1), weight = 1), ``random`` (x ~ N(0,1), weight ~ 1 + N(0,1)/2),
  ``wide`` (x ~ 300 * N(0,1), weight a signed ramp -2..2: fp16 squares overflow past |x| = 256).
- ``weight`` [same]: ``same`` (weight dtype = x dtype), a dtype name, or ``none`` (no weight).
- ``layout`` [contiguous]: ``contiguous`` (M, N); ``batched`` (M, 3, N), a 3-D input;
  ``strided`` rows of a wider (M, N + 64) buffer: row stride N + 64, last dim contiguous.
- ``offset`` [0.0]: Gemma-style ``offset + w``; ``residual`` [false]: fused ``x + residual``.
- ``requires`` [any]: ``cuda`` marks cases that only run on a GPU (reported as skipped elsewhere).

Inputs depend only on ``(seed, case name)``: a subset of a grid sees the same numbers as the full
grid, and a case fails or passes the same way wherever it is listed.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import torch

from rmsnorm_kernel.cli.common import DTYPES, SHORT
from rmsnorm_kernel.cli.validate import ConfigError

INPUTS = ("unit", "random", "wide")
LAYOUTS = ("contiguous", "batched", "strided")
WIDE_SCALE = 300.0  # |x| > 256 for ~40% of elements: x*x overflows float16 (max 65504)
STRIDE_PAD = 64  # extra columns of the `strided` layout's backing buffer
BATCH = 3  # middle dim of the `batched` layout


@dataclass(frozen=True)
class Case:
    grid: str
    m: int
    n: int
    dtype: str
    inputs: str = "random"
    weight: str = "same"
    layout: str = "contiguous"
    offset: float = 0.0
    residual: bool = False
    requires: str = "any"

    @property
    def name(self) -> str:
        parts = [f"M{self.m}xN{self.n}", SHORT.get(self.dtype, self.dtype), self.inputs]
        if self.weight != "same":
            parts.append(f"w={SHORT.get(self.weight, self.weight)}")
        if self.layout != "contiguous":
            parts.append(self.layout)
        if self.offset:
            parts.append(f"offset={self.offset:g}")
        if self.residual:
            parts.append("residual")
        return "/".join(parts)

    @property
    def x_shape(self) -> tuple[int, ...]:
        return (self.m, BATCH, self.n) if self.layout == "batched" else (self.m, self.n)

    @property
    def weight_dtype(self) -> str | None:
        if self.weight == "none":
            return None
        return self.dtype if self.weight == "same" else self.weight

    @property
    def tutorial_contract(self) -> bool:
        """Inside the tutorial's contract: 2-D contiguous fp32/fp16, weight of x's dtype,
        N <= 4096."""
        return (
            self.layout == "contiguous"
            and self.weight == "same"
            and not self.offset
            and not self.residual
            and self.dtype in ("float32", "float16")
            and self.n <= 4096
        )

    def as_dict(self) -> dict:
        return {"name": self.name, **asdict(self)}


_AXES = ("m", "n", "dtype", "inputs", "weight", "layout", "offset", "residual", "requires")


def expand_grid(name: str, blocks: Iterable[Mapping]) -> list[Case]:
    """All cases of one grid, in block order, each block in product order of ``_AXES``."""
    cases: list[Case] = []
    for block in blocks:
        unknown = set(block) - set(_AXES)
        if unknown:
            raise ConfigError(f"grid {name!r}: unknown axes {sorted(unknown)} (known: {_AXES})")
        values = [list(_as_list(block[a])) if a in block else [None] for a in _AXES]
        for combo in itertools.product(*values):
            kwargs = {a: v for a, v in zip(_AXES, combo, strict=True) if v is not None}
            case = Case(grid=name, **kwargs)
            _validate(case)
            cases.append(case)
    return cases


def build_cases(catalogue: Mapping, grids: Iterable[str]) -> list[Case]:
    """The cases of the selected grids, duplicates (same name) removed, order kept."""
    cases: list[Case] = []
    seen: set[str] = set()
    for grid in grids:
        if grid not in catalogue:
            raise ConfigError(f"unknown grid {grid!r} (catalogue has {sorted(catalogue)})")
        for case in expand_grid(grid, catalogue[grid]):
            if case.name not in seen:
                seen.add(case.name)
                cases.append(case)
    return cases


def _as_list(value) -> Iterable:
    if isinstance(value, str | int | float | bool):
        return [value]
    return value


def _validate(case: Case) -> None:
    if case.dtype not in DTYPES:
        raise ConfigError(f"case {case.name}: dtype must be one of {list(DTYPES)}")
    if case.inputs not in INPUTS:
        raise ConfigError(f"case {case.name}: inputs must be one of {INPUTS}")
    if case.layout not in LAYOUTS:
        raise ConfigError(f"case {case.name}: layout must be one of {LAYOUTS}")
    if case.weight not in ("same", "none", *DTYPES):
        raise ConfigError(f"case {case.name}: weight must be same, none or a dtype")
    if case.requires not in ("any", "cuda"):
        raise ConfigError(f"case {case.name}: requires must be any or cuda")
    if case.m < 1 or case.n < 1:
        raise ConfigError(f"case {case.name}: m and n must be positive")


@dataclass
class CaseInputs:
    x: torch.Tensor  # x_shape, case dtype (a strided view for the `strided` layout)
    weight: torch.Tensor | None  # (N,)
    dy: torch.Tensor  # x_shape, case dtype, contiguous
    residual: torch.Tensor | None  # x_shape, case dtype


def make_inputs(case: Case, device: torch.device | str, seed: int = 0) -> CaseInputs:
    """Deterministic inputs: drawn in float64 on the CPU, then cast and moved."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(case.name.encode()))
    dtype = DTYPES[case.dtype]
    shape = case.x_shape
    n = case.n
    scale = WIDE_SCALE if case.inputs == "wide" else 1.0

    def draw(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=g, dtype=torch.float64)

    if case.layout == "strided":
        base = (scale * draw(case.m, n + STRIDE_PAD)).to(dtype).to(device)
        x = base[:, :n]  # (M, N + 64) -> (M, N) view, row stride N + 64
    else:
        x = (scale * draw(*shape)).to(dtype).to(device)
    weight = None
    if case.weight_dtype is not None:
        if case.inputs == "unit":
            w = torch.ones(n, dtype=torch.float64)
        elif case.inputs == "random":
            w = 1.0 + 0.5 * draw(n)
        else:
            w = torch.linspace(-2.0, 2.0, n, dtype=torch.float64)
        weight = w.to(DTYPES[case.weight_dtype]).to(device)
    dy = draw(*shape).to(dtype).to(device)
    residual = (scale * draw(*shape)).to(dtype).to(device) if case.residual else None
    return CaseInputs(x=x, weight=weight, dy=dy, residual=residual)

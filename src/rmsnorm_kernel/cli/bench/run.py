"""``bench`` (``make bench``): ours beside its peers, every figure from one run on one GPU.

Writes ``<benchmark.out_dir>/bench.json`` (every measurement, the config, the machine) and
``bench_curves_<mode>.png``; prints the tables. Exits 0 when ours ran everywhere (a peer that is
missing or fails on a shape is a result, noted in its cell), 1 when ours failed a measurement,
2 on a bad config or without CUDA (before anything is written).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape

from rmsnorm_kernel.cli.bench.figures import plot_curves
from rmsnorm_kernel.cli.bench.measure import Runner
from rmsnorm_kernel.cli.bench.plan import read_plan
from rmsnorm_kernel.cli.bench.report import print_report
from rmsnorm_kernel.cli.common import environment, write_json
from rmsnorm_kernel.cli.validate import report_error

NO_GPU = (
    "bench needs a CUDA GPU: it times GPU kernels with CUDA graphs and CUDA events. Here the "
    "kernels would run in Triton's interpreter on the CPU, whose timings say nothing about them. "
    "Run `make bench` on a GPU machine (the correctness campaigns do run here)."
)


def _plain(cfg: Mapping) -> dict:
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


def run_bench(bcfg: Mapping, console: Console | None = None, *, timers=None, device=None) -> int:
    """Run the benchmark of ``cfg.benchmark``; ``timers``/``device`` are injected by tests."""
    console = console or Console()
    plan = read_plan(bcfg)  # a bad key stops here, before any output
    if timers is None:
        if not torch.cuda.is_available():
            return report_error(RuntimeError(NO_GPU))  # stderr, as every other refusal
        from rmsnorm_kernel.cli.bench.timers import CudaTimers

        timers, device = CudaTimers(plan.timing), "cuda"
    start = time.perf_counter()
    runner = Runner(
        plan, timers, device, log=lambda s: console.print(s, highlight=False, markup=False)
    )
    runner.run()
    out_dir = Path(plan.out_dir)
    payload = {
        "command": "bench",
        "environment": environment(),
        "ours": plan.ours,
        "peers": runner.peers_info(),
        "bytes_model": "forward 2*M*N*s, forward_backward 5*M*N*s (s = element size of x)",
        "ratio": "ours_vs_best_peer = best peer's value / ours (time or bytes): above 1, ours wins",
        "copy_ceiling": runner.copy,
        "groups": runner.groups,
        "config": _plain(bcfg),
        "elapsed_s": round(time.perf_counter() - start, 1),
    }
    path = write_json(payload, out_dir / "bench.json")
    figures = plot_curves(payload, out_dir)
    print_report(payload, console)
    for p in (path, *figures):
        console.print(f"wrote {p}", highlight=False)
    console.print(f"bench took {payload['elapsed_s']:.0f} s", highlight=False)
    failures = runner.ours_failures()
    for f in failures:
        console.print(f"[red]FAIL[/red] {plan.ours}: {escape(f)}", highlight=False)
    return 1 if failures else 0

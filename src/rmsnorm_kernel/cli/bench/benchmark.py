"""`benchmark`: the seed's timing protocol, our kernel against the reference and its peers.

Protocol (the seed's): CUDA events around whole calls (allocation, autograd and every launch
included, not only the Triton kernel body); 20 warm-up calls; 50 samples of 20 calls each; the
median sample divided by 20 is the reported latency.

Modes: ``forward`` (inputs require grad, as in training, so the graph is recorded) and
``forward_backward`` (forward, then ``torch.autograd.grad`` for dx and dgamma).

GB/s uses the *minimum* traffic of the operation, the same numerator for every implementation:
forward reads x and w and writes y (2 M N + N elements); backward reads x, dy, w and writes dx and
dw (3 M N + 2 N elements). Extra traffic an implementation makes (scratch, rstd) is not counted,
so GB/s is a rescaled latency, comparable across implementations and shapes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping

import torch
from rich.console import Console
from rich.table import Table

from rmsnorm_kernel.cli.campaigns.cases import DTYPES
from rmsnorm_kernel.cli.campaigns.report import environment, fmt, write_json

NOT_INSTALLED = "not installed"


def _peer_factories() -> dict[str, Callable[[float], Callable | str]]:
    """name -> factory(eps) returning ``f(x, w) -> y`` or a status string when unavailable."""

    def reference(eps):
        from rmsnorm_kernel.reference import rmsnorm_reference
        return lambda x, w: rmsnorm_reference(x, w, eps)

    def kernel(eps):
        from rmsnorm_kernel import rmsnorm
        return lambda x, w: rmsnorm(x, w, eps)

    def torch_rms_norm(eps):
        f = getattr(torch.nn.functional, "rms_norm", None)
        if f is None:
            return NOT_INSTALLED
        return lambda x, w: f(x, (x.shape[-1],), w, eps)

    def torch_compile_reference(eps):
        from rmsnorm_kernel.reference import rmsnorm_reference
        compiled = torch.compile(rmsnorm_reference, dynamic=False)
        return lambda x, w: compiled(x, w, eps)

    def liger(eps):
        try:
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        except ImportError:
            return NOT_INSTALLED

        def f(x, w):
            try:  # recent Liger: (X, W, eps, offset, casting_mode, in_place)
                return LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)
            except TypeError:  # v0.1: (X, W, eps)
                return LigerRMSNormFunction.apply(x, w, eps)
        return f

    def quack(eps):
        try:
            from quack import rmsnorm
        except ImportError:
            return NOT_INSTALLED
        return lambda x, w: rmsnorm(x, w, eps=eps)

    return {"reference": reference, "kernel": kernel, "torch_rms_norm": torch_rms_norm,
            "torch_compile_reference": torch_compile_reference, "liger": liger, "quack": quack}


PEERS = tuple(_peer_factories())


def time_calls(fn: Callable[[], object], warmup: int, samples: int, calls: int) -> list[float]:
    """Microseconds per call, one value per sample (CUDA events around ``calls`` whole calls)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1000.0 / calls)  # ms -> us, per call
    return out


def _make_call(f: Callable, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, mode: str):
    """One whole call of the timed operation."""
    if mode == "forward":
        return lambda: f(x, w)
    return lambda: torch.autograd.grad(f(x, w), (x, w), dy)


def traffic_bytes(m: int, n: int, x_bytes: int, w_bytes: int, mode: str) -> int:
    forward = 2 * m * n * x_bytes + n * w_bytes
    backward = 3 * m * n * x_bytes + 2 * n * w_bytes
    return forward if mode == "forward" else forward + backward


def run_benchmark(bcfg: Mapping, console: Console | None = None) -> int:
    from pathlib import Path

    console = console or Console()
    if not torch.cuda.is_available():
        console.print("[red]error:[/red] benchmark needs a CUDA GPU. It times GPU work with CUDA "
                      "events; on this machine the kernels run in Triton's interpreter on the "
                      "CPU, whose timings say nothing about the kernel. Run `make benchmark` on "
                      "a GPU machine (the correctness campaigns do run here).")
        return 2
    eps = float(bcfg["eps"])
    factories = _peer_factories()
    unknown = [p for p in bcfg["implementations"] if p not in factories]
    if unknown:
        console.print(f"[red]error:[/red] unknown implementations {unknown} (known: {PEERS})")
        return 2
    impls: dict[str, Callable | str] = {}
    for name in bcfg["implementations"]:
        try:
            impls[name] = factories[name](eps)
        except Exception as exc:  # a peer that cannot even be built is reported, not dropped
            impls[name] = f"error: {type(exc).__name__}: {exc}"
    rows = []
    for shape in bcfg["shapes"]:
        m, n, dtype = int(shape["m"]), int(shape["n"]), DTYPES[shape["dtype"]]
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
        w = (1 + 0.5 * torch.randn(n, device="cuda", generator=g)).to(dtype)
        dy = torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
        for mode in bcfg["modes"]:
            grad = mode == "forward_backward" or bool(bcfg["forward_requires_grad"])
            xg, wg = x.detach().requires_grad_(grad), w.detach().requires_grad_(grad)
            nbytes = traffic_bytes(m, n, x.element_size(), w.element_size(), mode)
            for name, f in impls.items():
                row = {"implementation": name, "m": m, "n": n, "dtype": shape["dtype"],
                       "mode": mode, "bytes": nbytes, "median_us": None, "gb_per_s": None,
                       "status": "ok"}
                if isinstance(f, str):
                    row["status"] = f
                    rows.append(row)
                    continue
                call = _make_call(f, xg, wg, dy, mode)
                try:
                    samples = time_calls(call, int(bcfg["warmup_calls"]), int(bcfg["samples"]),
                                         int(bcfg["calls_per_sample"]))
                except Exception as exc:
                    row["status"] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
                    rows.append(row)
                    continue
                med = statistics.median(samples)
                row.update({"median_us": med, "min_us": min(samples), "max_us": max(samples),
                            "samples_us": samples, "gb_per_s": nbytes / (med * 1e-6) / 1e9})
                rows.append(row)
            console.print(f"{m}x{n} {shape['dtype']} {mode}: done", highlight=False)

    table = Table(title=f"benchmark ({environment()['device']}): median of "
                        f"{bcfg['samples']} samples x {bcfg['calls_per_sample']} calls, "
                        f"{bcfg['warmup_calls']} warm-up calls")
    for col in ("shape", "dtype", "mode", "implementation", "median us", "GB/s", "vs reference",
                "status"):
        table.add_column(col, justify="right" if col in ("median us", "GB/s", "vs reference")
                         else "left")
    ref = {(r["m"], r["n"], r["dtype"], r["mode"]): r["median_us"] for r in rows
           if r["implementation"] == "reference"}
    for r in rows:
        base = ref.get((r["m"], r["n"], r["dtype"], r["mode"]))
        speed = f"{base / r['median_us']:.2f}x" if base and r["median_us"] else "-"
        table.add_row(f"{r['m']}x{r['n']}", r["dtype"], r["mode"], r["implementation"],
                      fmt(r["median_us"], ".2f"), fmt(r["gb_per_s"], ".1f"), speed, r["status"])
    console.print(table)
    path = write_json({"command": "benchmark", "environment": environment(),
                       "protocol": {k: bcfg[k] for k in ("warmup_calls", "samples",
                                                          "calls_per_sample",
                                                          "forward_requires_grad")},
                       "eps": eps, "results": rows},
                      Path(bcfg["out_dir"]) / "benchmark.json")
    console.print(f"benchmark -> {path}")
    failed = [r for r in rows if r["status"].startswith("error") and r["implementation"] in
              ("reference", "kernel")]
    return 1 if failed else 0

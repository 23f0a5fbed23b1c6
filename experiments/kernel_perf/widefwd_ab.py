"""Is ``wide_forward.py``'s hinted variant really faster than the package's chunked forward with
the same hints (``ForwardConfig(stream=True)``)? The H200's edge tune timed them at 91.6 and 98.0
us at 512 x 131072 bf16, but their PTX has the same memory instructions (``ptx_compare.py``,
36th session), so the gap must hold when the two run interleaved in one process (A B A B ...,
CUDA-graph replay, each round's median) before anything is ported. Also the package's default,
and the cooperative forward's best H100 config (``coop_forward.py`` mode 2), as references.

    PYTHONPATH=src:experiments/kernel_perf python3 experiments/kernel_perf/widefwd_ab.py
"""

from __future__ import annotations

import functools
import statistics

import torch
from triton.testing import do_bench_cudagraph

from rmsnorm_kernel import ops
from rmsnorm_kernel.config import ForwardConfig

EPS = 1e-6
ROUNDS = 7
SHAPES = [(512, 131072), (256, 262144)]


def variants(x, w):
    """(name, function) of each variant at x's shape."""
    import coop_forward
    import wide_forward

    m, n = x.shape  # the launcher's own heuristic call (ops.launch_forward, no residual)
    default = ops.forward_config(m, n, x.device.index, False, x.dtype, n * 2, 2)
    stream = ForwardConfig(**{**default.__dict__, "stream": True, "evict_last": True})
    launch = functools.partial(ops.launch_forward, x, w, None, EPS, 0.0, x.dtype)
    coop = (16, 8, 2, 2) if x.shape[1] <= 131072 else (16, 8, 1, 2)
    return [
        ("package default", launch),
        ("package stream", functools.partial(launch, config=stream)),
        (
            "wide_forward hints",
            functools.partial(wide_forward.launch, x, w, EPS, 16384, 32, True, False),
        ),  # fmt: skip
        (f"coop {coop}", functools.partial(coop_forward.coop_forward, x, w, EPS, *coop)),
    ]


def main() -> None:
    for m, n in SHAPES:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        runs = variants(x, w)
        want = runs[0][1]()[0]
        for name, fn in runs:  # compile outside the captures; the same values (up to rounding)
            err = (fn()[0].float() - want.float()).abs().max().item()
            print(f"{m}x{n} {name}: max |y - package| {err:.3g}", flush=True)
        torch.cuda.synchronize()
        times: dict[str, list[float]] = {name: [] for name, _ in runs}
        for _ in range(ROUNDS):
            for name, fn in runs:
                times[name].append(1e3 * do_bench_cudagraph(fn, rep=20, return_mode="median"))
        base = statistics.median(times["package default"])
        for name, ts in times.items():
            med = statistics.median(ts)
            print(
                f"{m}x{n} {name:28s} median {med:7.1f} us (rounds {min(ts):.1f}-{max(ts):.1f}),"
                f" {base / med:.3f}x the package's default",
                flush=True,
            )


if __name__ == "__main__":
    main()

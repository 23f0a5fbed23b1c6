"""A torch.profiler trace (CPU + CUDA activity, Python stacks, every thread) of a few eager
fwd + ``autograd.grad`` calls of host_split.py's rows, to see on which thread and between which
events the host time of one call goes (issue 17's host cost). Run on a GPU box:

    PYTHONPATH=src python3 experiments/kernel_perf/host_trace.py OUT [--rows "ours,empty Function"]

Writes one Chrome trace per row (``OUTDIR/<row>.json``; open in Perfetto or chrome://tracing)
and prints each row's top host events.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(__file__))
from host_split import variants  # noqa: E402

CALLS = 30


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--rows", default="minimal Function,empty + launch in bwd,F.rms_norm fwd+bwd")
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--n", type=int, default=257)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(args.m, args.n, device=device, requires_grad=True)
    w = torch.ones(args.n, device=device, requires_grad=True)
    dy = torch.randn(args.m, args.n, device=device)
    calls_of = variants(x, w, dy)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for name in args.rows.split(","):
        fn = calls_of[name]
        for _ in range(200):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        with profile(activities=activities, with_stack=True) as prof:
            for _ in range(CALLS):
                fn()
            if device == "cuda":
                torch.cuda.synchronize()
        slug = name.replace(" ", "_").replace("+", "p").replace(".", "").replace(",", "")
        prof.export_chrome_trace(os.path.join(args.out, f"{slug}.json"))
        print(f"== {name}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()

"""Where a Llama training step's time goes, per variant: torch.profiler over a few steps of HF
LlamaForCausalLM (built from a config on the GPU, bf16, SDPA; fwd + bwd + AdamW), eager or under
torch.compile, with HF's own norm or the project's patch.

Prints, per variant: wall time per step, GPU kernel time per step (user annotations left out),
their gap (host/launch time the GPU waited; the profiler's own per-op host cost included), the
kernels whose names mention a norm, and the top kernels by GPU time. Run on a GPU box from the
repo root:
    PYTHONPATH=src python3 experiments/llama/probes/profile_step.py H LAYERS BATCH SEQ VARIANT...
VARIANT: hf | ours | ours_fused | liger, each optionally suffixed ``+compile``. ``AMP=1`` in the
environment: the experiment's bf16-mixed instead (float32 weights, the step under bfloat16
autocast, as Lightning's ``precision=bf16-mixed`` runs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import torch
from llama_setup import liger_swap, llama_config, token_ids
from torch.profiler import ProfilerActivity, profile
from transformers import LlamaForCausalLM

from rmsnorm_kernel.integrations.transformers import patch

hidden, layers, batch, seq = (int(a) for a in sys.argv[1:5])
variants = sys.argv[5:] or ["hf", "ours", "hf+compile", "ours+compile"]
cfg = llama_config(hidden, layers, seq)
ids = token_ids(batch, seq)


AMP = os.environ.get("AMP") == "1"


def step(run, opt):
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if AMP else contextlib.nullcontext()
    with amp:
        out = run(ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


results = {}
for variant in variants:
    name, _, mode = variant.partition("+")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
        if not AMP:
            model = model.to(torch.bfloat16)
    if name == "ours":
        patch(model)
    elif name == "ours_fused":
        patch(model, fuse_residual=True)
    elif name == "liger":
        liger_swap(model)
    run = torch.compile(model) if mode == "compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    for _ in range(4):
        step(run, opt)
    torch.cuda.synchronize()
    steps = 3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step(run, opt)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / steps
    # GPU-side events, less user annotations: "Optimizer.step#AdamW.step" is a range over the
    # optimizer's kernels on the GPU timeline (counted before the eighteenth session: +6.6 ms).
    kernels = [
        e
        for e in prof.key_averages()
        if e.device_type.name == "CUDA" and not getattr(e, "is_user_annotation", False)
    ]
    gpu = sum(e.self_device_time_total for e in kernels) / steps / 1e3
    norm_like = [
        e
        for e in kernels
        if any(k in e.key.lower() for k in ("rms", "norm", "rsqrt", "pow_mean", "mean"))
    ]
    top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:12]
    results[variant] = {
        "wall_ms": wall * 1e3,
        "gpu_ms": gpu,
        "norm_kernels_ms": sum(e.self_device_time_total for e in norm_like) / steps / 1e3,
        "kernel_launches_per_step": sum(e.count for e in kernels) / steps,
        "gpu_idle_ms": wall * 1e3 - gpu,  # no kernel running (on one stream): host-bound time
    }
    print(
        f"== {variant}: wall {wall * 1e3:.2f} ms/step, GPU kernels {gpu:.2f} ms/step "
        f"(idle {wall * 1e3 - gpu:.2f}), "
        f"launches {results[variant]['kernel_launches_per_step']:.0f}/step",
        flush=True,
    )
    for label, events in (("norm-like", norm_like[:10]), ("top", top)):
        for e in events:
            ms = e.self_device_time_total / steps / 1e3
            print(f"   {label:9s} {ms:8.3f} ms x{e.count // steps:4d} {e.key[:90]}")
    del run, model, opt
    torch.cuda.empty_cache()
print(json.dumps(results, indent=1))

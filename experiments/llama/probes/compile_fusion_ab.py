"""The shared compile probe's step (``llama_compile_step.py``: HF Llama built from a config, bf16,
SDPA, fwd + bwd + AdamW, ``torch.compile(model)``, interleaved rounds of 10 steps after a warm
round), with the Inductor pass of ``rmsnorm_kernel.inductor_fusion`` on and off for our patch:

    hf          HF's own norm (Inductor fuses it)
    ours        patch(model, inductor_fusion=False): the norm an opaque op, nothing folded
    ours_fusion the same patch compiled with the pass (RMSNormFusionPass in the compile's options;
                what patch(model) does by default, through Inductor's global setting):
                the residual add and the gradient accumulation folded into our kernels
    ours_fused_fusion  patch(model, fuse_residual=True), compiled with the pass
    ours_fusion_gemm   the pass with gemm_sums=True too: the q/k/v and gate/up projections'
                input-gradient sums into the norms' dy become addmm chains
    liger       LigerRMSNorm(casting_mode="llama") with the same weights

The variants share their code, so Dynamo would reuse one variant's compiled graph for the next:
the pass goes in each compile's own options instead of Inductor's global setting (another
backend, so another compile), and each variant runs its first step right after it is built.
    PYTHONPATH=src python3 experiments/llama/probes/compile_fusion_ab.py HIDDEN LAYERS BATCH SEQ
        [ROUNDS] [JSON]
"""

import json
import statistics
import sys
import time
import traceback

import torch
from llama_setup import liger_swap, llama_config, token_ids
from transformers import LlamaForCausalLM

from rmsnorm_kernel import inductor_fusion
from rmsnorm_kernel.integrations.transformers import patch

hidden, layers, batch, seq = (int(a) for a in sys.argv[1:5])
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
out_json = sys.argv[6] if len(sys.argv) > 6 else None
cfg = llama_config(hidden, layers, seq)
ids = token_ids(batch, seq)
# Every graph compiled here, none from a cache: the rewrite counts then say what the pass did.
torch._inductor.config.fx_graph_cache = False
torch._functorch.config.enable_autograd_cache = False


variants = {
    "hf": None,
    "ours": {"inductor_fusion": False},
    "ours_fusion": {"inductor_fusion": False, "fusion": True},
    "ours_fused_fusion": {"inductor_fusion": False, "fuse_residual": True, "fusion": True},
    "ours_fusion_gemm": {"inductor_fusion": False, "fusion": "gemm"},
    "liger": "liger",
}
models, rewrites, warm, failed = {}, {}, {}, []
for name, how in variants.items():
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    options = None
    if how == "liger":
        try:
            liger_swap(m)
        except ImportError as e:
            print("liger unavailable:", e)
            continue
    elif how is not None:
        how = dict(how)
        fusion = how.pop("fusion", False)
        if fusion:
            fusion_pass = inductor_fusion.RMSNormFusionPass(gemm_sums=fusion == "gemm")
            options = {"post_grad_custom_post_pass": fusion_pass}
        patch(m, **how)
    cm = torch.compile(m, options=options)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, foreach=True)
    before = dict(inductor_fusion.REWRITES)
    t0 = time.perf_counter()
    try:
        out = cm(ids, labels=ids)  # compiles forward and backward
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    except Exception:  # say it, and measure the other variants (one device call, many figures)
        print(f"{name}: FAILED in its first step", flush=True)
        traceback.print_exc()
        failed.append(name)
        del m, cm, opt
        continue
    warm[name] = time.perf_counter() - t0
    rewrites[name] = {k: inductor_fusion.REWRITES[k] - before[k] for k in before}
    print(
        f"{name}: first step incl. compile {warm[name]:.1f} s, rewrites {rewrites[name]}",
        flush=True,
    )
    models[name] = (cm, opt)

times = {k: [] for k in models}
# GiB: torch.cuda.max_memory_allocated over a round's steps (every variant's model and optimizer
# live at once, so this is theirs together plus the step's peak), and that peak above what was
# allocated before the variant's steps: the variant's own activations and gradients.
peak = {k: 0.0 for k in models}
step_peak = {k: 0.0 for k in models}
for r in range(rounds + 1):
    for name, (cm, opt) in models.items():

        def step(cm=cm, opt=opt):
            out = cm(ids, labels=ids)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return out.loss.detach()

        torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t = time.perf_counter()
        k = 10
        for _ in range(k):
            step()
        torch.cuda.synchronize()
        if r:
            times[name].append((time.perf_counter() - t) / k)
            peak[name] = max(peak[name], torch.cuda.max_memory_allocated() / 2**30)
            above = (torch.cuda.max_memory_allocated() - resident) / 2**30
            step_peak[name] = max(step_peak[name], above)
print(f"llama hidden {hidden} layers {layers} batch {batch}x{seq} bf16, torch.compile")
med = {k: statistics.median(v) for k, v in times.items()}
for name, ts in times.items():
    runs = ", ".join(f"{t * 1e3:.2f}" for t in ts)
    print(
        f"{name:18s} step {med[name] * 1e3:8.2f} ms (runs {runs}), peak {peak[name]:.2f} GiB, "
        f"{step_peak[name]:.2f} above resident"
    )
ratio = {k: round(med["hf"] / v, 4) for k, v in med.items()}
print("speed vs hf (hf step / step):", ratio)
if out_json:
    with open(out_json, "w") as f:
        json.dump(
            {
                "model": {"hidden": hidden, "layers": layers, "batch": batch, "seq": seq},
                "rounds": rounds,
                "step_ms": {k: [t * 1e3 for t in v] for k, v in times.items()},
                "median_ms": {k: v * 1e3 for k, v in med.items()},
                "speed_vs_hf": ratio,
                "peak_gib": peak,
                "step_peak_above_resident_gib": step_peak,
                "rewrites": rewrites,
                "failed": failed,
                "first_step_s": warm,
                "torch": torch.__version__,
            },
            f,
            indent=1,
        )

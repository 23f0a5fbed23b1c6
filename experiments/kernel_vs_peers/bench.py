"""Time rmsnorm_kernel against its peers on one GPU: forward and forward+backward, many shapes.

Peers: PyTorch's fused ``F.rms_norm``, ``torch.compile`` of the reference, Liger-Kernel and quack
when importable (a missing peer is reported as such, never dropped silently).

    python experiments/kernel_vs_peers/bench.py --out results/h200.json

Timing: ``triton.testing.do_bench`` (CUDA events, median of repeats, L2 flushed between runs),
gradients reset to None every run. GB/s counts each tensor read or written once:
forward x + y (+ w), backward x + dy + dx (+ w, dw).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

import torch
import triton

import rmsnorm_kernel as rk

EPS = 1e-6
SHAPES = [  # (M, N, dtype): seed shape, LLM hidden sizes, wide rows
    (128, 257, torch.float32),
    (4096, 4096, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (32768, 2048, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (4096, 16384, torch.bfloat16),
    (2048, 32768, torch.bfloat16),
    (1024, 65536, torch.bfloat16),
    (256, 262144, torch.bfloat16),
    (16384, 4096, torch.float32),
    (16384, 4096, torch.float16),
]


def reference(x, w):
    return rk.rmsnorm_reference(x, w, EPS)


def peers() -> dict:
    out = {
        "rmsnorm_kernel": lambda x, w: rk.rmsnorm(x, w, EPS),
        "torch.F.rms_norm": lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS),
        "torch.compile(reference)": torch.compile(reference, dynamic=False),
    }
    try:
        from liger_kernel.transformers.functional import liger_rms_norm

        out["liger_kernel"] = lambda x, w: liger_rms_norm(x, w, EPS)
    except Exception as err:  # noqa: BLE001 - report why the peer is absent
        out["liger_kernel"] = f"not installed: {err!r}"
    try:
        from quack import rmsnorm as quack_rmsnorm

        out["quack"] = lambda x, w: quack_rmsnorm(x, w, eps=EPS)
    except Exception as err:  # noqa: BLE001
        out["quack"] = f"not installed: {err!r}"
    return out


def bench_one(fn, m, n, dtype):
    x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
    w = (1 + 0.1 * torch.randn(n, device="cuda", dtype=dtype)).requires_grad_()
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    exact = rk.rmsnorm_reference(x.detach().double(), w.detach().double(), EPS)
    with torch.no_grad():
        err = (fn(x, w).double() - exact).abs().max().item()

    def fwd():
        with torch.no_grad():
            fn(x, w)

    def fwd_bwd():
        fn(x, w).backward(dy)

    t_f = triton.testing.do_bench(fwd, warmup=25, rep=100, return_mode="median")
    t_fb = triton.testing.do_bench(
        fwd_bwd, warmup=25, rep=100, grad_to_none=[x, w], return_mode="median"
    )
    e = torch.tensor([], dtype=dtype).element_size()
    fwd_bytes = 2 * m * n * e + n * e
    bwd_bytes = 3 * m * n * e + 2 * n * e
    return {
        "fwd_ms": t_f,
        "fwd_bwd_ms": t_fb,
        "fwd_GBps": fwd_bytes / t_f / 1e6,
        "fwd_bwd_GBps": (fwd_bytes + bwd_bytes) / t_fb / 1e6,
        "max_abs_err_vs_fp64": err,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true", help="first four shapes only")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench.py needs a CUDA GPU", file=sys.stderr)
        return 2
    impls = peers()
    shapes = SHAPES[:4] if args.quick else SHAPES
    rows = []
    for m, n, dtype in shapes:
        # A fresh Dynamo cache per shape: with one compiled function for all shapes, Dynamo's
        # recompile limit (8) silently ran the 9th shape on eagerly (seen in the 2026-11-29 run).
        torch._dynamo.reset()
        for name, fn in impls.items():
            row = {"impl": name, "M": m, "N": n, "dtype": str(dtype).replace("torch.", "")}
            if isinstance(fn, str):
                row["status"] = fn
            else:
                try:
                    row.update(bench_one(fn, m, n, dtype))
                    row["status"] = "ok"
                except Exception as err:  # noqa: BLE001 - a peer failing a shape is a result
                    row["status"] = f"failed: {type(err).__name__}: {str(err)[:200]}"
            rows.append(row)
            torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "eps": EPS,
    }
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print_table(rows)
    return 0


def print_table(rows):
    print(f"{'shape':>22} {'impl':>26} {'fwd us':>9} {'GB/s':>6} {'f+b us':>9} {'GB/s':>6}")
    for r in rows:
        shape = f"{r['M']}x{r['N']} {r['dtype']}"
        if r["status"] != "ok":
            print(f"{shape:>22} {r['impl']:>26} {r['status'][:60]}")
            continue
        print(
            f"{shape:>22} {r['impl']:>26} {1e3 * r['fwd_ms']:9.1f} {r['fwd_GBps']:6.0f} "
            f"{1e3 * r['fwd_bwd_ms']:9.1f} {r['fwd_bwd_GBps']:6.0f}"
        )


if __name__ == "__main__":
    sys.exit(main())

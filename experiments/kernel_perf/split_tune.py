"""Tune the split-row forward (``ForwardConfig.split``) against the package's heuristic config, per
shape and dtype, under CUDA-graph replay (kernel time only), interleaved round by round.

For each shape: the heuristic's config (whatever ``forward_config`` picks, which is the baseline
and may itself be a split config once SPLIT_FORWARD takes it), then split configs of every
(block, warps) in the grid below, ``split = ceil(N / block)``. Each config is checked against
float64 first (a wrong one is reported, never timed). Writes a JSON of medians and a table.
``--staged``: also the staged kernel's configs (STAGED; ``ForwardConfig.stages`` > 1), some at
two programs per SM (TWO_PER_SM). ``--pkg-cluster``: the package's cluster forward
(``ForwardConfig.cluster``; PKG_CLUSTER). ``--variants``, ``--coop``: see below.

    PYTHONPATH=src python3 experiments/kernel_perf/split_tune.py --json OUT.json [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import sys

import torch
from triton.testing import do_bench_cudagraph

from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
#: (M, N, dtype, residual)
SHAPES = [
    (4096, 32768, BF16, False),
    (2048, 32768, BF16, False),
    (1024, 65536, BF16, False),
    (4096, 65536, BF16, False),
    (512, 131072, BF16, False),
    (256, 262144, BF16, False),
    (128, 524288, BF16, False),
    (64, 1048576, BF16, False),
    (8, 262144, BF16, False),
    (1024, 100000, BF16, False),
    (1024, 150000, BF16, False),
    (512, 131072, FP16, False),
    (512, 131072, BF16, True),
    (1024, 65536, FP32, False),
    (512, 131072, FP32, False),
    (256, 262144, FP32, False),
    # 41st session: the cluster plans' other keys and widths
    (256, 262144, FP16, False),
    (256, 262144, BF16, True),
    (512, 131072, FP32, True),
    (1024, 65536, FP32, True),
    (1024, 100000, FP32, False),
]
#: (block, warps) per element size: a program's chunk stays in registers three times over
#: (the pipeline two steps ahead), so wider chunks need more warps.
GRID = {
    2: [(8192, 4), (8192, 8), (16384, 8), (16384, 16), (32768, 16)],
    4: [(4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16)],
}
#: ``--staged``: (block, warps, stages) of the staged split kernel (``ForwardConfig.stages`` > 1,
#: the chunk loads pipelined into shared memory: stages - 1 chunks of x, and of the residual,
#: ~227 KiB an SM), per element size. Registers on sm_90 (Triton 3.6 / 3.9,
#: ``compile_check``-style, 38th session): bf16 16384 x 8 warps 176-182 (with a residual 181-188),
#: 8192 x 8 92-119, float32 8192 x 16 61-64.
STAGED = {
    2: [(16384, 8, 2), (16384, 8, 3), (16384, 8, 4), (8192, 8, 3), (8192, 8, 5), (16384, 16, 3)],
    4: [(8192, 16, 2), (8192, 16, 3), (4096, 8, 3), (4096, 8, 5)],
}
#: Staged (block, warps) that also run two programs per SM (config.SPLIT_PROGRAMS_PER_SM = 2
#: while they run): ~92-119 registers at 8 warps, so two fit an SM's 64K, and twice the loads
#: in flight.
TWO_PER_SM = {(8192, 8), (4096, 8)}
#: ``--wide``: (block, warps, stages, programs per SM) of wide_split.py's kernel (39th session;
#: swapped in for ops.FORWARD_SPLIT_STAGED: stages 2 = no pipelining, 3 = one chunk of x and of
#: the weight ahead in shared memory). sm_90 builds (Triton 3.6), registers, no spills: bf16
#: 65536 x 32 warps 64, 32768 x 16 98 (3 stages: 80), 32768 x 32 56, 16384 x 8 80; float32
#: 32768 x 32 64, 16384 x 16 109.
WIDE = {
    2: [
        (65536, 32, 2, 1), (32768, 16, 2, 1), (32768, 16, 3, 1), (32768, 32, 2, 1),
        (16384, 8, 2, 1), (16384, 8, 2, 2), (16384, 8, 2, 3),
    ],
    4: [(32768, 32, 2, 1), (16384, 16, 2, 1), (8192, 8, 2, 2)],
}  # fmt: skip
#: ``--wide-sync``: the WIDE configs also timed with wide_split.py's other waits (SYNCS: one lane
#: a warp spinning; no wait, wrong values, for the bound).
WIDE_SYNC = {(65536, 32, 2, 1), (32768, 32, 2, 1), (16384, 8, 2, 3)}
#: ``--word``: (block, warps, programs per SM, ahead) of wide_split.word_forward (slot words, no
#: counters, atomics or fences; float32 accumulation, no residual; ahead: the next chunk loaded
#: before the wait). sm_90 (Triton 3.6) registers: bf16 65536 x 32 64, 16384 x 8 89 (ahead 165:
#: one an SM), 32768 x 16 ahead 128 (40 bytes of stack); float32 32768 x 32 64 (16 of stack),
#: 8192 x 8 ahead 128, 16384 x 16 ahead 128.
WORD = {
    2: [
        (65536, 32, 1, False), (16384, 8, 2, False), (16384, 8, 3, False),
        (16384, 8, 1, True), (32768, 16, 1, True),
    ],
    4: [(32768, 32, 1, False), (8192, 8, 2, False), (8192, 8, 2, True), (16384, 16, 1, True)],
}  # fmt: skip
#: ``--cluster``: (block, warps, w_early) of cluster_split.cluster_forward (a row over the CTAs
#: of one hardware cluster, C = ceil(N / block) <= 8, one cluster barrier a row; w_early: arrive,
#: load the weight, then wait). sm_90 (Triton 3.6) registers: bf16 65536 x 32 64 (184 bytes of
#: stack), 32768 x 16 102 (w_early 123), 16384 x 8 102 (121); float32 32768 x 32 64 (w_early: 24
#: bytes of stack), 16384 x 16 60 (83).
CLUSTER = {
    2: [(65536, 32, False), (32768, 16, False), (16384, 8, False), (32768, 16, True),
        (16384, 8, True)],
    4: [(32768, 32, False), (16384, 16, False), (16384, 16, True)],
}  # fmt: skip

#: ``--pkg-cluster``: (block, warps) of the package's cluster forward (``ForwardConfig.cluster``,
#: 40th session: cluster_split.py's kernel with every feature, launched by ``CachedKernel``),
#: C = ceil(N / block) <= 8. sm_90 (Triton 3.6) registers: bf16 65536 x 32 64 (with a residual
#: 264 bytes of stack: not timed there), 32768 x 16 82 (residual 102), 16384 x 8 72 (86); fp16
#: 32768 x 16 94 (128); float32 32768 x 32 64, 16384 x 16 60.
PKG_CLUSTER = {
    2: [(65536, 32), (32768, 16), (16384, 8), (32768, 32), (16384, 4), (16384, 16)],
    4: [(32768, 32), (16384, 16), (16384, 32)],
}

#: ``--walk``: (block, warps, walk, hold_w) of cluster_split.cluster_forward(walk=...) (41st
#: session: ``min(M, SMs * walk // C)`` clusters walk the rows, the next row's chunk loaded
#: between the barrier's arrive and wait; hold_w: the weight held over the rows). sm_90 (Triton
#: 3.6) registers: bf16 16384 x 8 105 (hold_w 159), 32768 x 16 128 (118 at C = 1), 32768 x 32
#: 58-60 (C = 1 and 2), 16384 x 16 77; float32 16384 x 16 125 (124); bf16 65536 x 32 and float32
#: 32768 x 32 spill (360 / 104 bytes of stack): not timed.
WALK = {
    2: [(16384, 8, 1, False), (16384, 8, 2, False), (16384, 8, 4, False), (16384, 8, 1, True),
        (32768, 16, 1, False), (32768, 32, 1, False), (16384, 16, 1, False)],
    4: [(16384, 16, 1, False), (16384, 16, 2, False), (16384, 16, 1, True)],
}  # fmt: skip

#: Variants of the package's split kernel, made by replacing text in a copy of
#: kernels/forward_split.py (each old string must occur once: a kernel that changed fails loudly),
#: for A/B in one process: ``carry``: the counter read two steps ahead is rounded to its target at
#: the wait, not at the load (its value then first used two steps later); ``cg``: that read an L2
#: (device-scope) load instead of ``volatile`` (system scope, LDG.E.64.STRONG.SYS in SASS);
#: ``carry_cg``: both.
_CARRY = [
    ("    return x, res, seen - seen % C + C", "    return x, res, seen"),
    (
        '    seen = tl.atomic_add(COUNT + row, 0, sem="acquire", scope="gpu")\n    while seen',
        "    target = target - target % C + C\n"
        '    seen = tl.atomic_add(COUNT + row, 0, sem="acquire", scope="gpu")\n    while seen',
    ),
]
_CG = [
    (
        "    seen = tl.load(COUNT + row, volatile=True)",
        '    seen = tl.load(COUNT + row, cache_modifier=".cg")',
    )
]
VARIANTS = {"carry": _CARRY, "cg": _CG, "carry_cg": _CARRY + _CG}


def variant_kernel(name):
    """The split kernel of VARIANTS[name], compiled from a patched copy of kernels/forward_split.py
    imported as a module of the package (its relative imports resolve), in a cooperative
    CachedKernel."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loaded by path in tests
    from patched import load_patched

    from rmsnorm_kernel.kernels import forward_split
    from rmsnorm_kernel.launch import CachedKernel

    module = load_patched(
        forward_split.__file__, VARIANTS[name], f"rmsnorm_kernel.kernels.split_{name}"
    )
    return CachedKernel(module.rmsnorm_forward_split_kernel, cooperative=True)


def swapped(owner, name, value, fn):
    """``fn`` with ``owner.name`` set to ``value`` while it runs (graph capture too)."""

    def call():
        real = getattr(owner, name)
        setattr(owner, name, value)
        try:
            return fn()
        finally:
            setattr(owner, name, real)

    return call


def with_kernel(kernel, fn):
    """``fn`` with ops.FORWARD_SPLIT swapped for ``kernel`` while it runs."""
    return swapped(ops, "FORWARD_SPLIT", kernel, fn)


def with_per_sm(per_sm, fn):
    """``fn`` with config.SPLIT_PROGRAMS_PER_SM at ``per_sm`` while it runs (its grid)."""
    return swapped(config, "SPLIT_PROGRAMS_PER_SM", per_sm, fn)


def heuristic(x, residual):
    """The package's own choice (``ops._heuristic_forward``) for these rows."""
    m, n = x.shape
    return ops._heuristic_forward(x, residual, m, n, x.device.index, torch.float32)


def run(x, w, res, cfg):
    return ops.launch_forward(x, w, res, 1e-6, 0.0, x.dtype, config=cfg)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=int, default=25, help="do_bench_cudagraph rep (ms)")
    p.add_argument("--min-n", type=int, default=0, help="only shapes at least this wide")
    p.add_argument("--shapes", default="", help="only these, comma-separated MxN (every dtype)")
    p.add_argument(
        "--coop", action="store_true", help="also coop_forward.py's mode 3 (fresh counters)"
    )
    p.add_argument(
        "--variants",
        default="",
        help=f"comma-separated, of {sorted(VARIANTS)}: the heuristic's"
        " config through each variant of the split kernel",
    )
    p.add_argument("--quick", action="store_true", help="only the heuristic, chunked, variants")
    p.add_argument("--staged", action="store_true", help="also the staged kernel's STAGED configs")
    p.add_argument("--wide", action="store_true", help="also wide_split.py's WIDE configs")
    p.add_argument("--wide-sync", action="store_true", help="--wide, and WIDE_SYNC's other waits")
    p.add_argument("--word", action="store_true", help="also wide_split.word_forward's WORD")
    p.add_argument("--cluster", action="store_true", help="also cluster_split's CLUSTER configs")
    p.add_argument(
        "--pkg-cluster",
        action="store_true",
        help="also the package's PKG_CLUSTER configs (and, where the heuristic takes a cluster"
        " plan, what the rules take without it)",
    )
    p.add_argument(
        "--dsmem",
        action="store_true",
        help="--cluster's configs (no w_early, C > 1) also with the partials through DSMEM, and "
        "with no exchange at all (a wrong answer: the meeting's cost)",
    )
    p.add_argument(
        "--maxnreg",
        type=lambda v: [int(r) for r in v.split(",")],
        default=[],
        help="with --dsmem: also each config (the L2 meeting) under each of these ptxas register "
        "caps (comma-separated; more CTAs an SM); DSMEM under a cap spilled and lost (43rd "
        "session), so it is timed under the first cap only",
    )
    p.add_argument(
        "--reload",
        type=lambda v: [int(r) for r in v.split(",")],
        default=[],
        help="with --dsmem: also each config with x not held over the meeting, in these numbers "
        "of sub-chunks (comma-separated), through L2, DSMEM and no exchange; a negative number: "
        "DSMEM only, the first pass one sum",
    )
    p.add_argument(
        "--walk", action="store_true", help="also cluster_split's row-walking clusters (WALK)"
    )
    args = p.parse_args()
    variants = {v: variant_kernel(v) for v in args.variants.split(",") if v}
    sms = config.sm_count(0)
    out = []
    for m, n, dtype, has_res in SHAPES:
        if n < args.min_n or args.shapes and f"{m}x{n}" not in args.shapes.split(","):
            continue
        x = torch.randn(m, n, device="cuda").to(dtype)
        w = (1 + 0.5 * torch.randn(n, device="cuda")).to(dtype)
        res = torch.randn(m, n, device="cuda").to(dtype) if has_res else None
        base = heuristic(x, res)
        h = x if res is None else (x.double() + res.double()).to(dtype)
        want = h.double() * torch.rsqrt(h.double().pow(2).mean(-1, keepdim=True) + 1e-6)
        want = want * w.double()
        cands = {"heuristic": base}
        if args.pkg_cluster and base.cluster:
            cands["rules, no cluster plan"] = ops._heuristic_forward(
                x, res, m, n, x.device.index, torch.float32, cluster_plans=False
            )
        for block, warps in [] if args.quick else GRID[x.element_size()]:
            c = -(-n // block)
            if c > sms:
                continue
            cands[f"split {c}x{block} w{warps}"] = ForwardConfig(block, 0, warps, split=c)
        for block, warps, stages in STAGED[x.element_size()] if args.staged else []:
            c = -(-n // block)
            ring = (stages - 1) * block * x.element_size() * (2 if has_res else 1)
            if c > sms or ring > config.shared_bytes(0):  # refused by the launcher's check
                continue
            cands[f"staged {c}x{block} w{warps} s{stages}"] = ForwardConfig(
                block, 0, warps, split=c, stages=stages
            )
        for block, warps in PKG_CLUSTER[x.element_size()] if args.pkg_cluster else []:
            c = -(-n // block)
            if c > config.MAX_CLUSTER or block > n or (has_res and block * warps == 65536 * 32):
                continue  # (bf16 65536 x 32 warps spills with a residual)
            cands[f"pkg cluster {c}x{block} w{warps}"] = ForwardConfig(block, 0, warps, cluster=c)
        fns = {name: functools.partial(run, x, w, res, cfg) for name, cfg in cands.items()}
        if (args.wide or args.wide_sync) and not has_res:
            from wide_split import wide_split_kernel

            from rmsnorm_kernel.launch import CachedKernel

            kernels = {"all": CachedKernel(wide_split_kernel, cooperative=True)}
            if args.wide_sync:
                import wide_split

                for sync in wide_split.SYNCS[1:]:
                    kernels[sync] = CachedKernel(wide_split.variant_kernel(sync), cooperative=True)
            for block, warps, stages, per_sm in WIDE[x.element_size()]:
                c = -(-n // block)
                if c > sms or block > n:
                    continue
                for sync, wide in kernels.items():
                    if sync != "all" and (block, warps, stages, per_sm) not in WIDE_SYNC:
                        continue
                    name = f"wide {c}x{block} w{warps} s{stages} x{per_sm}/SM"
                    name += "" if sync == "all" else f" sync={sync}"
                    cfg = ForwardConfig(block, 0, warps, split=c, stages=stages)
                    cands[name] = cfg
                    call = functools.partial(run, x, w, res, cfg)
                    fns[name] = with_per_sm(
                        per_sm, swapped(ops, "FORWARD_SPLIT_STAGED", wide, call)
                    )
        if base.split:  # the chunked walk too, for the record
            cands["chunked"] = ForwardConfig(config.LOOP_BLOCK, 0, config.LOOP_WARPS)
            fns["chunked"] = functools.partial(run, x, w, res, cands["chunked"])
        for name, cfg in list(cands.items()):
            if name.startswith("staged") and (cfg.block, cfg.num_warps) in TWO_PER_SM:
                cands[f"{name} x2/SM"] = cfg
                fns[f"{name} x2/SM"] = with_per_sm(2, fns[name])
        if base.split:
            for v, kernel in variants.items():
                cands[f"variant {v}"] = base
                fns[f"variant {v}"] = with_kernel(kernel, fns["heuristic"])
        if args.word and not has_res:
            from wide_split import word_forward

            for block, warps, per_sm, ahead in WORD[x.element_size()]:
                if -(-n // block) > sms or block > n:
                    continue
                name = f"word {-(-n // block)}x{block} w{warps} x{per_sm}/SM"
                name += " ahead" if ahead else ""
                cands[name] = None
                fns[name] = functools.partial(word_forward, x, w, 1e-6, block, warps, per_sm, ahead)
        if (args.cluster or args.dsmem) and not has_res:
            from cluster_split import MAX_CLUSTER, cluster_forward

            for block, warps, early in CLUSTER[x.element_size()]:
                c = -(-n // block)
                if c > MAX_CLUSTER or block > n or (args.dsmem and (early or c == 1)):
                    continue
                name = f"cluster {c}x{block} w{warps}" + (" w_early" if early else "")
                cands[name] = None
                fns[name] = functools.partial(cluster_forward, x, w, 1e-6, block, warps, early)
                caps = args.maxnreg
                for exchange, early, reg, rl, label in (
                    [(1, False, None, 0, "dsmem"), (1, True, None, 0, "dsmem w_early"),
                     (2, False, None, 0, "no exchange")]
                    + [(0, False, cap, 0, f"maxnreg {cap}") for cap in caps]
                    + [(1, False, cap, 0, f"dsmem maxnreg {cap}") for cap in caps[:1]]
                    + [(ex, False, None, r, f"{lab}reload {r}") for r in args.reload
                       for ex, lab in [(0, ""), (1, "dsmem "), (2, "no exchange ")]
                       if r > 0 or ex == 1]
                    if args.dsmem
                    else []
                ):  # fmt: skip
                    cands[f"{name} {label}"] = None
                    fns[f"{name} {label}"] = functools.partial(
                        cluster_forward, x, w, 1e-6, block, warps, early, exchange=exchange,
                        maxnreg=reg, reload=abs(rl), whole_sum=rl < 0,
                    )  # fmt: skip
        if args.walk and not has_res:
            from cluster_split import MAX_CLUSTER, cluster_forward

            for block, warps, walk, hold_w in WALK[x.element_size()]:
                c = -(-n // block)
                if c > MAX_CLUSTER or block > n:
                    continue
                name = f"walk {c}x{block} w{warps} x{walk}" + (" hold_w" if hold_w else "")
                cands[name] = None
                fns[name] = functools.partial(
                    cluster_forward, x, w, 1e-6, block, warps, walk=walk, hold_w=hold_w
                )
        if args.coop and not has_res:
            from coop_forward import coop_forward

            block, warps = GRID[x.element_size()][2]
            c = -(-n // block)
            cands[f"coop_forward mode 3 {c}x{block} w{warps}"] = None
            fns[f"coop_forward mode 3 {c}x{block} w{warps}"] = functools.partial(
                coop_forward, x, w, 1e-6, c, warps, 1, 3
            )
        ok = {}
        for name, fn in fns.items():
            try:
                y = fn()[0]
                torch.cuda.synchronize()
                err = (y.double() - want).abs().max().item()
                if config.SPLIT_GRID_CAP:  # a refused grid (x2/SM): it ran on fewer programs
                    print(f"{m}x{n} {name}: grid refused, capped {config.SPLIT_GRID_CAP}")
                    config.SPLIT_GRID_CAP.clear()
                    config.forward_config.cache_clear()
                    continue
                ok[name] = err
            except Exception as e:  # noqa: BLE001 (a config this card refuses: record it)
                print(f"{m}x{n} {dtype} {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        times = {name: [] for name in ok}
        for _ in range(args.rounds):
            for name in ok:
                times[name].append(do_bench_cudagraph(fns[name], rep=args.rep) * 1e3)
        med = {name: statistics.median(v) for name, v in times.items()}
        b = med["heuristic"]
        tag = f"{m}x{n} {str(dtype)[6:]}{' +res' if has_res else ''}"
        print(f"{tag}: heuristic {base}", flush=True)
        for name in sorted(med, key=med.get):
            print(
                f"  {name:28s} {med[name]:8.1f} us  {b / med[name]:.3f}x heuristic  "
                f"err {ok[name]:.3g}",
                flush=True,
            )
        out.append(
            {
                "shape": tag,
                "heuristic": dataclasses.asdict(base),
                "us": med,
                "rounds": times,
                "err": ok,
            }
        )
    if args.dsmem:  # the registers of what ran (ptxas' count, spills)
        import cluster_split

        for key, (compiled, _) in cluster_split._COMPILED.items():
            print("registers", key[1:4], key[5], key[-3:], compiled.n_regs, compiled.n_spills)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

"""Kernel tuning and peer figures on one GPU, in one run (writes JSON, prints a table).

    PYTHONPATH=src python3 experiments/kernel_perf/tune.py --out r.json [--parts fwd,bwd,peers,acc]

Parts:
- fwd:   forward variants -- several rows per program (N <= 1024: ROWS x warps), one-pass warps
         (2048-16384), and one pass vs chunked two-pass for wide rows (32768-262144).
- bwd:   backward variants -- warps and programs per SM beside the defaults, float64 row
         accumulation, and the previous two-launch backward (previous_backward.py).
- peers: the issue's shapes in graph mode (CUDA-graph replay: kernel time only), ours beside
         F.rms_norm and Liger when importable; GB/s = bytes moved / time (fwd 2MNs, fwd+bwd 5MNs).
- small: small M (SMALL: 128-2048 rows x 257-4096) in graph mode: backward alone over explicit
         grids (row groups x sum finish with or without pipelining, or the tree at 2-16 children
         per node), beside fwd+bwd of ours, F.rms_norm, Liger.
- tree:  the in-launch dweight tree's fan-out at large M (TREE_LARGE), beside the sum finish.
- pipe:  large M at 256-2048 columns (PIPE): pipelining stages x programs per SM.
- rowsbwd: the several-rows backward tile at 256-2048 columns (PIPE): rows per step x programs
         per SM x stages.
- rowsbwd32: the same on float32 rows (ROWS32).
- fwdmid: the forward at 1024-8192 columns (FWD_MID): the several-rows kernel at 1-4 rows x
         warps, and one row per program x warps, beside the default.
- narrow: short rows (NARROW, 256-1024, or env NARROW): forward rows kernel at rows x warps,
         several-rows backward at rows x warps x programs per SM.
- bwdq:  the backward on quack's shapes (16384x4096, 65536x1024, 4096x4096 bf16) in graph mode:
         programs per SM x warps, the dweight finish, pipelining stages.
- wide:  the backward at 4096-16384 columns (WIDE) in graph mode: programs per SM x warps x
         stages beside the default and the previous backward; one-row forward warps.
- widefwd: the forward of rows >= 32768 wide (WIDE_FWD) in graph mode: the default beside
         wide_forward.py's chunk x warps x cache hints x pass-2 order variants.
- splitfwd: the forward of rows >= 32768 wide (WIDE_FWD) over several cooperating programs per
         row (wide_forward.py's split-row kernel) beside the default.
- coopfwd: the same split rows on a persistent grid launched cooperatively (no program waits
         on one that is not running), SPLIT x warps x programs per SM.
- persistfwd: a persistent pipelined one-row forward (persistent_forward.py) beside the default.
- earlyw: the one-row forward with the weight loaded before the reduction (early_weight_forward.py),
         with and without masks, and after it (the old order), beside the default and Liger, in
         interleaved rounds (EARLYW); the several-rows kernel's two orders (EARLYW_ROWS).
- hints: the one-row forward with cache hints (hint_forward.py: eviction policies, a streaming
         store) and other warp counts, beside the default, compile and Liger (HINTS).
- packed: packed_forward.py's one-pass forward (the row kept 16-bit in registers, fewer registers
         per thread) beside the default, compile and Liger (PACKED, bf16).
- tiny:  the smallest, latency-bound forward shapes (TINY): several-rows and one-row configs x
         warps beside the default and Liger, interleaved rounds.
- tmafwd: tma_forward.py's persistent descriptor (TMA) forward, rows per tile x stages x warps
         x programs per SM, beside the default (TMA_FWD shapes).
- tmafwdnarrow: part tmafwd on short bf16 rows (TMA_FWD_NARROW: 64-512 columns, or env
         TMA_FWD_NARROW), inference (no rstd stored), rows per tile up to 256, 1-4 per SM.
- narrowfwd: the several-rows forward on short bf16 rows (NARROW_FWD: 64-256 columns, or env
         NARROW_FWD), inference, rows per program x warps, the best 3 re-timed interleaved.
- tmabwd: tma_backward.py's descriptor (TMA) backward, rows x warps x stages x programs per SM,
         beside the default (TMA_BWD shapes).
- tmapkg: the package's TMA backward config (BWD_TMA) against the heuristic without it, 4096 to
         131072 rows (TMA_PKG).
- tmasweep: the package's TMA backward at widths BWD_TMA does not take yet (TMA_SWEEP): rows x
         stages x warps x programs per SM beside the default.
- tmacand: tmasweep's winners (TMA_CAND) against the pointer heuristic over M, as tmapkg.
- tmastride: the TMA backward's row tiles dealt grid-stride (BackwardConfig.strided) against
         the heuristic's blocks, at every BWD_TMA width over M, dx checked against it.
- fwdwarps: the one-pass forward at FWD_WARPS (bf16; env FWD_WARPS): 4-32 warps x evict_last,
         the packed one pass at 8-32 warps, beside the heuristic, Liger and compile. The same x
         each call: at 32-128 MiB of x its replays favour no hint by 3% (fwdhint, 49th session).
- fwdhint: the heuristic's forward with and without evict_last, on the same x each call and
         on x rotated over 256 MiB of tensors (FWD_HINT; env FWD_HINT), beside Liger.
- tmanew: the TMA backward, blocks and grid-stride, at widths BWD_TMA does not take (TMA_NEW:
         256 bf16, 512 float32) over M, beside the heuristic, dx checked against it.
- tmajoin: the package's backward heuristic (TMA where BWD_TMA takes the width) against the
         pointer heuristic, timed first and last, over M (TMA_JOIN, or env TMA_JOIN), dx checked:
         the check before a width's plan joins BWD_TMA from TMA_MIN_M.
- columns: small M, the backward's column-strip finish (BackwardConfig.dw_columns: one launch,
         no partials) against the heuristic (COLUMNS), graph time and eager host cost.
- colrule: backward alone around the column-strip rule (COLUMNS_MAX_ELEMS; COLRULE): the
         heuristic's choice, the sum finish and the strips, dx checked.
- tmadeep: the TMA backward with 5-8 stages around BWD_TMA's plans (TMA_DEEP), beside the
         heuristic, dx checked against it.
- ctas:  thread-block clusters (num_ctas 1-8) x warps for wide forward and backward rows.
- ctaspkg: the heuristics' cluster configs (FWD_CLUSTERS, BWD_CLUSTERS) against the one-CTA
         configs they replace (needs Triton >= 3.8; CTAS_PKG_*).
- onelaunch: small M, backward alone: the sum finish (two launches) against the in-launch tree
         at the same grid (one level, or 16 children per node), graph time and eager host cost
         per call beside F.rms_norm's (ONELAUNCH).
- evict: the forward's row load with and without the evict_last hint (EVICT: the bench's
         shapes and every forward path), beside twice the warps with it.
- fwd32k: part fwdpkg at 32768 bf16 columns only (FWD32K): the packed pass at 16 and 32 warps.
- acc:   float32 dweight max error vs the float64 oracle, ours (float64 and float32 partials) and
         F.rms_norm's, on the campaign's shapes.
Variant timings: triton.testing.do_bench (CUDA events, L2 flushed, median) on >= 128 MB tensors.
Every variant is an explicit launch config (``rmsnorm_kernel.config``) handed to the launchers:
nothing in the package is rebound, so what is timed is what the config says.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
import traceback

import torch
import torch.nn.functional as F
import triton

import rmsnorm_kernel as rk
from rmsnorm_kernel import config, ops
from rmsnorm_kernel.config import ForwardConfig, _row_warps, backward_config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # previous_backward.py

EPS = 1e-6
ELEMS = 64 << 20  # 64M elements: 128 MB per bf16 tensor, well past the 60 MB L2


def ms_bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


def ms_graph(fn) -> float:
    return triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")


def fwd_variant(x, w, cfg: ForwardConfig):
    """``(run, max error vs F.rms_norm)`` of one forward config."""
    n = x.shape[1]

    def run():
        return ops.launch_forward(x, w, None, EPS, 0.0, x.dtype, config=cfg)[0]

    y = run()
    err = (y.float() - F.rms_norm(x.float(), (n,), w.float(), EPS)).abs().max().item()
    return run, err


def _fwd_record(rows, part, m, n, name, x, w, cfg):
    """Time one forward config in graph mode (``cfg=None``: the launcher's default) and record
    ``us``, ``GBps`` (2MNs bytes) and the max error vs F.rms_norm, or the error that stopped it."""
    r = dict(part=part, M=m, N=n, variant=name, config=repr(cfg))
    try:
        if cfg is None:
            fn = functools.partial(ops.launch_forward, x, w, None, EPS, 0.0, x.dtype)
            err = (fn()[0].float() - F.rms_norm(x.float(), (n,), w.float(), EPS)).abs().max()
            err = err.item()
        else:
            fn, err = fwd_variant(x, w, cfg)
        us = graph_us(fn)
        r.update(us=us, GBps=2 * m * n * x.element_size() / us / 1e3, max_err=err)
    except Exception as e:  # noqa: BLE001 - keep sweeping, record why
        r["error"] = repr(e)[:300]
    rows.append(r)
    print(json.dumps(r), flush=True)


def part_fwd(rows):
    def record(**r):
        rows.append(dict(part="fwd", **r))
        print(json.dumps(rows[-1]), flush=True)

    for n in [128, 256, 512, 1024]:
        m = ELEMS // n
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        gb = 2 * m * n * 2 / 1e9
        variants = [ForwardConfig(n, 0, 4)]  # one row per program
        for tile in (1024, 4096, 16384):
            for warps in (4, 8):
                if tile >= n:
                    variants.append(ForwardConfig(n, tile // n, warps))
        for v in variants:
            try:
                fn, err = fwd_variant(x, w, v)
                ms = ms_bench(fn)
                record(
                    M=m,
                    N=n,
                    rows=v.rows,
                    warps=v.num_warps,
                    us=1e3 * ms,
                    GBps=gb / ms * 1e3,
                    max_err=err,
                )
            except Exception as e:  # noqa: BLE001 - keep sweeping, record why
                record(M=m, N=n, variant=repr(v), error=repr(e)[:300])
        del x, w
    for n in [2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]:
        m = ELEMS // n
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        gb = 2 * m * n * 2 / 1e9
        variants = []
        if n <= 65536:
            for warps in (4, 8, 16, 32) if n <= 16384 else (16, 32):
                if 32 * warps <= n:
                    variants.append(ForwardConfig(n, 0, warps))
        if n >= 32768:
            for chunk, warps in ((4096, 8), (8192, 16), (8192, 32), (16384, 32)):
                variants.append(ForwardConfig(chunk, 0, warps))
        for v in variants:
            try:
                fn, err = fwd_variant(x, w, v)
                ms = ms_bench(fn)
                record(
                    M=m,
                    N=n,
                    one_pass=v.block >= n,
                    block=v.block,
                    warps=v.num_warps,
                    us=1e3 * ms,
                    GBps=gb / ms * 1e3,
                    max_err=err,
                )
            except Exception as e:  # noqa: BLE001
                record(M=m, N=n, variant=repr(v), error=repr(e)[:300])
        del x, w


def bwd_time(m, n, changes, per_sm=None):
    """``(ms, dweight relative error)`` of the heuristic's backward config for ``(m, n)`` (with
    ``per_sm`` programs per SM if given) with ``changes`` (BackwardConfig fields) applied."""
    cfg = dataclasses.replace(_sum_finish(backward_config(m, n, 0, False, per_sm)), **changes)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    _, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, torch.bfloat16)

    def fn():
        return ops.launch_backward(dy, x, w, rstd, 0.0, None, torch.bfloat16, config=cfg)

    dx, dw = fn()
    xd = x.double()
    ref = (dy.double() * xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + EPS)).sum(0)
    rel = ((dw.double() - ref).abs().max() / ref.abs().max()).item()
    return ms_bench(fn), rel, cfg


def part_bwd(rows):
    """Current launcher (defaults and alternatives) beside the previous two-launch backward."""
    import previous_backward

    def record(**r):
        rows.append(dict(part="bwd", **r))
        print(json.dumps(rows[-1]), flush=True)

    sm = torch.cuda.get_device_properties(0).multi_processor_count
    alternatives = {  # (warps, programs per SM) beside the defaults
        1024: [],
        4096: [(4, 2), (8, 2), (8, 3)],
        8192: [(8, 1), (16, 1), (16, 2)],
        16384: [(16, 1), (32, 1), (16, 2)],
    }
    for n, alts in alternatives.items():
        m = ELEMS // n
        gb = 3 * m * n * 2 / 1e9
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        _, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, torch.bfloat16)
        try:
            ms = ms_bench(lambda: previous_backward.launch(dy, x, w, rstd, sm))  # noqa: B023
            record(M=m, N=n, variant="previous (2 launches)", us=1e3 * ms, GBps=gb / ms * 1e3)
        except Exception as e:  # noqa: BLE001
            record(M=m, N=n, variant="previous (2 launches)", error=repr(e)[:300])
        variants = [
            ("default", {}, None),
            ("sum launch, float64 rows", dict(tree=False, dw_float64=True), None),
            ("in-launch tree, float64 rows", dict(tree=True, dw_float64=True), None),
            ("sum launch, float32 rows", dict(tree=False, dw_float64=False), None),
        ]
        variants += [(f"warps={wp} per_sm={ps}", dict(num_warps=wp), ps) for wp, ps in alts]
        for name, changes, per_sm in variants:
            try:
                ms, rel, cfg = bwd_time(m, n, changes, per_sm)
                record(
                    M=m,
                    N=n,
                    variant=name,
                    config=repr(cfg),
                    us=1e3 * ms,
                    GBps=gb / ms * 1e3,
                    dw_rel_err=rel,
                )
            except Exception as e:  # noqa: BLE001
                record(M=m, N=n, variant=name, error=repr(e)[:300])


def graph_us(fn) -> float:
    fn()  # compile outside the capture
    torch.cuda.synchronize()
    return 1e3 * ms_graph(fn)


def _bwd_inputs(m, n, dtype=torch.bfloat16):
    torch.manual_seed(0)
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    _, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, dtype)
    xd = x.double()
    ref = (dy.double() * xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + EPS)).sum(0)
    return x, w, dy, rstd, ref


def _bwd_record(rows, part, m, n, name, cfg, inputs, dx0=None):
    """Time ``cfg``'s backward in graph mode; record its dweight's error against the float64
    reference and, given ``dx0``, the max abs difference of its dx from it."""
    x, w, dy, rstd, ref = inputs
    r = dict(part=part, M=m, N=n, variant=name, config=repr(cfg))
    try:
        cfg.check(m, n)

        def fn():
            return ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)

        dx, dw = fn()
        if dx0 is not None:
            r["dx_diff"] = (dx.float() - dx0.float()).abs().max().item()
        us = graph_us(fn)
        r.update(
            us=us,
            GBps=3 * m * n * x.element_size() / us / 1e3,
            dw_rel_err=((dw.double() - ref).abs().max() / ref.abs().max()).item(),
        )
    except Exception as e:  # noqa: BLE001 - keep sweeping, record why
        r["error"] = repr(e)[:300]
    rows.append(r)
    print(json.dumps(r), flush=True)


def _sum_finish(cfg):
    """``cfg`` with the sum finish in place of column strips (COLUMNS_MAX_ELEMS): the parts
    written before the strips vary the sum finish's grid and the tree at small M."""
    return dataclasses.replace(cfg, dw_columns=0, dw_rows=0)


def _grid(m, n, groups, base):
    rpp = triton.cdiv(m, groups)
    return dataclasses.replace(base, groups=triton.cdiv(m, rpp), rows_per_program=rpp)


def _peers_graph(rows, part, m, n, dtype=torch.bfloat16):
    """Ours, F.rms_norm and Liger in graph mode: fwd and fwd+bwd us, GB/s (fwd 2MNs, fwd+bwd
    5MNs bytes). Fresh leaves per implementation: a graph kept alive from eager calls on the
    same leaves makes the capture fail."""
    s = torch.finfo(dtype).bits // 8
    for name, f in peer_fns().items():
        x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
        w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        r = dict(part=part, M=m, N=n, dtype=str(dtype), impl=name)
        try:
            fwd = graph_us(lambda: f(x.detach(), w.detach()))  # noqa: B023
            r.update(fwd_us=fwd, fwd_GBps=2 * m * n * s / fwd / 1e3)
            fb = graph_us(lambda: torch.autograd.grad(f(x, w), (x, w), dy))  # noqa: B023
            r.update(fb_us=fb, fb_GBps=5 * m * n * s / fb / 1e3)
        except Exception as e:  # noqa: BLE001
            r["error"] = repr(e)[:300]
            traceback.print_exc()
        rows.append(r)
        print(json.dumps(r), flush=True)


#: Small-M shapes of part small: (M, N, dtype). 4096 columns measured on 2026-11-30 (the sum
#: finish won); the narrow ones decide whether the in-launch tree should stay below 1024 columns
#: at small M too (128 x 257 fp32 was 12.45 us fwd+bwd with the old two-launch backward).
SMALL = [
    (256, 4096, torch.bfloat16),
    (1024, 4096, torch.bfloat16),
    (2048, 4096, torch.bfloat16),
    (128, 257, torch.float32),
    (256, 1024, torch.bfloat16),
    (1024, 1024, torch.bfloat16),
]


def part_small(rows):
    """Small M: the persistent grid's partials and the tree's sequential tail dominate. Per
    grid: the sum finish with and without pipelining, and the in-launch tree at 2-16 children
    per node (float64 rows where the default has them)."""
    for m, n, dtype in SMALL:
        _peers_graph(rows, "small", m, n, dtype)
        inputs = _bwd_inputs(m, n, dtype)
        base = _sum_finish(backward_config(m, n, 0, itemsize=dtype.itemsize))
        _bwd_record(rows, "small", m, n, "default", base, inputs)
        for groups in (32, 64, 128, 264, 512):
            if groups > m:
                continue
            grid = _grid(m, n, groups, base)
            for stages in (1, 3):
                cfg = dataclasses.replace(grid, tree=False, stages=stages)
                _bwd_record(rows, "small", m, n, f"g={groups} sum stages={stages}", cfg, inputs)
            for fanout in (2, 4, 8, 16):
                cfg = dataclasses.replace(grid, tree=True, fanout=fanout, stages=1)
                _bwd_record(rows, "small", m, n, f"g={groups} tree fanout={fanout}", cfg, inputs)
        del inputs


#: Large-M shapes where the heuristic keeps the in-launch tree (N <= 1024): its fan-out beside
#: the sum finish, at the default grid.
TREE_LARGE = [
    (65536, 1024, torch.bfloat16),
    (16384, 1024, torch.bfloat16),
    (262144, 256, torch.bfloat16),
]


def part_tree(rows):
    for m, n, dtype in TREE_LARGE:
        inputs = _bwd_inputs(m, n, dtype)
        base = _sum_finish(backward_config(m, n, 0, itemsize=dtype.itemsize))
        _bwd_record(rows, "tree", m, n, "default", base, inputs)
        for fanout in (4, 8, 16):
            cfg = dataclasses.replace(base, tree=True, fanout=fanout)
            _bwd_record(rows, "tree", m, n, f"tree fanout={fanout}", cfg, inputs)
        cfg = dataclasses.replace(base, tree=False)
        _bwd_record(rows, "tree", m, n, "sum", cfg, inputs)
        del inputs


#: Shapes of part pipe: large M with rows up to 2048 wide, where quack and Inductor lead the
#: fwd+bwd (bench 2026-11-30: 262144 x 256 299 us vs 187, 65536 x 1024 198 vs 176, 16384 x 2048
#: 105 vs 99) and the row loop was never pipelined.
PIPE = [
    (262144, 256, torch.bfloat16),
    (131072, 512, torch.bfloat16),
    (65536, 1024, torch.bfloat16),
    (16384, 2048, torch.bfloat16),
    (32768, 2048, torch.bfloat16),
]


def part_pipe(rows):
    """Backward alone in graph mode: pipelining stages x programs per SM at the default finish."""
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, dtype in PIPE:
        inputs = _bwd_inputs(m, n, dtype)
        base = backward_config(m, n, 0, itemsize=dtype.itemsize)
        _bwd_record(rows, "pipe", m, n, "default", base, inputs)
        for per_sm in (2, 4, 8, 16):
            grid = _grid(m, n, sm * per_sm, base)
            for stages in (1, 2, 3, 4):
                cfg = dataclasses.replace(grid, stages=stages)
                _bwd_record(rows, "pipe", m, n, f"per_sm={per_sm} stages={stages}", cfg, inputs)
        del inputs


def part_rowsbwd(rows, shapes=PIPE, part="rowsbwd"):
    """Backward alone in graph mode at 256-2048 columns (PIPE): the several-rows tile
    (``BackwardConfig.rows``: rows per step x programs per SM x stages, 4 warps for tiles up to
    2048 values, else 8) beside the default (one row per step)."""
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, dtype in shapes:
        inputs = _bwd_inputs(m, n, dtype)
        base = backward_config(m, n, 0, itemsize=dtype.itemsize)
        _bwd_record(rows, part, m, n, "default", base, inputs)
        for tile_rows in (2, 4, 8):
            warps = 4 if tile_rows * base.block <= 2048 else 8
            for per_sm in (4, 8, 16):
                grid = _grid(m, n, sm * per_sm, base)
                for stages in (1, 3):
                    cfg = dataclasses.replace(grid, rows=tile_rows, num_warps=warps, stages=stages)
                    name = f"rows={tile_rows} w={warps} per_sm={per_sm} stages={stages}"
                    _bwd_record(rows, part, m, n, name, cfg, inputs)
        del inputs


#: float32 rows for part rowsbwd32 (32M elements: 128 MB per tensor), where BWD_ROWS is unmeasured.
ROWS32 = [(131072, 256, torch.float32), (65536, 512, torch.float32), (32768, 1024, torch.float32)]


def part_rowsbwd32(rows):
    """part rowsbwd on float32 rows (ROWS32)."""
    part_rowsbwd(rows, ROWS32, "rowsbwd32")


#: Shapes of part fwdmid: one-row-per-program forward widths where Liger / quack / Inductor led
#: by 2-5% (bench 2026-11-30), and 1024 (rows kernel) for comparison.
FWD_MID = [(4096, 4096), (16384, 4096), (16384, 2048), (32768, 2048), (8192, 8192), (65536, 1024)]


def part_fwdmid(rows):
    """Forward in graph mode: the default beside the several-rows kernel at 1-4 rows per program
    x 4-16 warps, and one row per program at 4-16 warps."""
    for m, n in FWD_MID:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        variants = [("default", None)]
        for warps in (4, 8, 16):
            variants.append((f"one row w={warps}", ForwardConfig(n, 0, warps)))
            for tile_rows in (1, 2, 4):
                if tile_rows * n <= 16384:
                    variants.append(
                        (f"rows={tile_rows} w={warps}", ForwardConfig(n, tile_rows, warps))
                    )
        for name, cfg in variants:
            _fwd_record(rows, "fwdmid", m, n, name, x, w, cfg)
        x = w = None


#: Shapes of part narrow: short rows where Inductor / quack lead (bench 2026-11-30, session 23:
#: 131072 x 512 fwd 68.8 us vs 64.9, fwd+bwd 191.0 vs 174.6; 65536 x 1024 193.2 vs 175.1).
NARROW = [(262144, 256), (131072, 512), (65536, 1024)]
#: ``NARROW="MxN,..."`` replaces them (bf16), e.g. the per-head q/k norms of Qwen3 (N = 128):
#: 524288 x 128 trailed compile 0.44x fwd+bwd (twenty-eighth session, model-width bench).
if os.environ.get("NARROW"):
    NARROW = [tuple(map(int, item.split("x"))) for item in os.environ["NARROW"].split(",")]


def part_narrow(rows):
    """Short rows in graph mode: the forward's rows kernel at rows x warps, then the several-rows
    backward at rows x warps x programs per SM (3 stages)."""
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n in NARROW:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for tile_rows in (1, 2, 4, 8, 16, 32, 64, 128):
            for warps in (1, 2, 4, 8, 16):
                if tile_rows * n > 16384 or tile_rows * n < 32 * warps:
                    continue
                cfg = ForwardConfig(n, tile_rows, warps)
                _fwd_record(rows, "narrow", m, n, f"fwd rows={tile_rows} w={warps}", x, w, cfg)
        x = w = None
        inputs = _bwd_inputs(m, n)
        base = backward_config(m, n, 0)
        _bwd_record(rows, "narrow", m, n, "bwd default", base, inputs)
        for tile_rows in (2, 4, 8, 16, 32):
            for warps in (2, 4, 8):
                if tile_rows * n > 8192 or tile_rows * n < 32 * warps:
                    continue
                for per_sm in (4, 8, 16):
                    cfg = dataclasses.replace(
                        _grid(m, n, sm * per_sm, base), rows=tile_rows, num_warps=warps, stages=3
                    )
                    name = f"bwd rows={tile_rows} w={warps} per_sm={per_sm}"
                    _bwd_record(rows, "narrow", m, n, name, cfg, inputs)
                    if cfg.tree:  # the default's finish is the tree: the sum finish beside it
                        cfg = dataclasses.replace(cfg, tree=False, dw_float64=False)
                        _bwd_record(rows, "narrow", m, n, name + " sum", cfg, inputs)
        del inputs


def part_bwdq(rows):
    """quack's shapes: programs per SM x warps (sum finish, float32 rows), then the finish and
    the pipelining depth at a few grids."""
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n in ((16384, 4096), (65536, 1024), (4096, 4096)):
        _peers_graph(rows, "bwdq", m, n)
        inputs = _bwd_inputs(m, n)
        base = backward_config(m, n, 0)
        _bwd_record(rows, "bwdq", m, n, "default", base, inputs)
        for per_sm in (1, 2, 3, 4, 6, 8):
            for warps in (4, 8, 16):
                cfg = dataclasses.replace(
                    _grid(m, n, sm * per_sm, base), tree=False, dw_float64=False, num_warps=warps
                )
                _bwd_record(rows, "bwdq", m, n, f"per_sm={per_sm} w={warps} sum", cfg, inputs)
        for per_sm in (1, 2, 4):
            g = _grid(m, n, sm * per_sm, base)
            for name, ch in (
                ("tree f64", dict(tree=True, dw_float64=True)),
                ("tree f32", dict(tree=True, dw_float64=False)),
                ("sum stages=2", dict(tree=False, dw_float64=False, stages=2)),
                ("sum stages=3", dict(tree=False, dw_float64=False, stages=3)),
            ):
                cfg = dataclasses.replace(g, **ch)
                _bwd_record(rows, "bwdq", m, n, f"per_sm={per_sm} {name}", cfg, inputs)
        del inputs


#: Shapes of part wide: where the one-launch backward measured slower than the previous
#: backward (32768x8192 +8.5%, 8192x16384 +1.9%, 16384x4096 fp32 +0.9%; bench 2026-11-30).
WIDE = [
    (32768, 8192, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (8192, 16384, torch.bfloat16),
    (16384, 4096, torch.float32),
]


def part_wide(rows):
    """Backward at 4096-16384 columns in graph mode: programs per SM x warps x pipelining stages
    (sum finish, float32 rows), beside the default and the previous two-launch backward (whose
    8192-column config was 2 programs per SM at 4 warps); then one-row forward warps."""
    import previous_backward

    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, dtype in WIDE:
        inputs = _bwd_inputs(m, n, dtype)
        x, w, dy, rstd, _ = inputs
        base = backward_config(m, n, 0, itemsize=dtype.itemsize)
        _bwd_record(rows, "wide", m, n, "default", base, inputs)
        r = dict(part="wide", M=m, N=n, variant="previous (2 launches)")
        r["us"] = graph_us(lambda: previous_backward.launch(dy, x, w, rstd, sm))  # noqa: B023
        r["GBps"] = 3 * m * n * x.element_size() / r["us"] / 1e3
        rows.append(r)
        print(json.dumps(r), flush=True)
        for per_sm in (1, 2, 3, 4):
            for warps in (4, 8, 16):
                for stages in (1, 2):
                    cfg = dataclasses.replace(
                        _grid(m, n, sm * per_sm, base),
                        tree=False,
                        dw_float64=False,
                        num_warps=warps,
                        stages=stages,
                    )
                    name = f"per_sm={per_sm} w={warps} stages={stages}"
                    _bwd_record(rows, "wide", m, n, name, cfg, inputs)
        for warps in (2, 4, 8, 16):
            if 32 * warps > n:
                continue
            cfg = ForwardConfig(triton.next_power_of_2(n), 0, warps)
            _fwd_record(rows, "wide", m, n, f"forward w={warps}", x, w, cfg)
        inputs = x = w = dy = rstd = None  # free before the next shape


#: Shapes of part widefwd: rows the forward walks twice in chunks (quack led 1.4x at 4096 x 65536).
WIDE_FWD = [(1024, 65536), (4096, 65536), (512, 131072), (2048, 32768)]
if os.environ.get("WIDE_FWD"):  # "MxN,..." replaces them
    WIDE_FWD = [tuple(map(int, s.split("x"))) for s in os.environ["WIDE_FWD"].split(",")]


def _wide_inputs(m, n):
    """bf16 ``x (m, n)``, ``w (n,)``, F.rms_norm's float32 output and the forward's GB moved."""
    torch.manual_seed(0)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    return x, w, F.rms_norm(x.float(), (n,), w.float(), EPS), 2 * m * n * x.element_size() / 1e9


def part_widefwd(rows):
    """Forward of wide rows in graph mode: the package's default beside wide_forward.py's
    variants (chunk x warps x cache hints x pass-2 order), bf16 with a weight."""
    import wide_forward

    for m, n in WIDE_FWD:
        x, w, ref, gb = _wide_inputs(m, n)

        def record(name, fn, m=m, n=n, ref=ref, gb=gb):
            r = dict(part="widefwd", M=m, N=n, variant=name)
            try:
                err = (fn()[0].float() - ref).abs().max().item()
                us = graph_us(fn)
                r.update(us=us, GBps=gb / us * 1e6, max_err=err)
            except Exception as e:  # noqa: BLE001
                r["error"] = repr(e)[:300]
            rows.append(r)
            print(json.dumps(r), flush=True)

        record("default", lambda: ops.launch_forward(x, w, None, EPS, 0.0, x.dtype))  # noqa: B023
        base = config.forward_config(m, n, 0, False, x.dtype, n * x.element_size(), 2)
        if base.rows == 0 and base.block < n:  # the package's chunked pass, pass 2 hinted
            hinted = (dataclasses.replace(base, stream=True, evict_last=on) for on in (False, True))
            # and pass 2 pipelined (ForwardConfig.stages), with the hints and without
            piped = (
                dataclasses.replace(base, stream=on, stages=k)
                for on in (True, False)
                for k in (2, 3)
            )
            for cfg in dict.fromkeys((*hinted, *piped, base)):
                record(f"package {cfg}", _fwd_with(x, w, None, x.dtype, cfg))
        for block, warps in ((8192, 16), (16384, 32), (16384, 16)):
            for hints in (False, True):
                for reverse in (False, True):
                    name = f"block={block} w={warps} hints={hints} reverse={reverse}"
                    variant = functools.partial(
                        wide_forward.launch, x, w, EPS, block, warps, hints, reverse
                    )
                    record(name, variant)
        # Pass 1 pipelined (unmeasured yet): smaller chunks, more of them in flight.
        for block, warps in ((4096, 8), (8192, 8), (8192, 16)):
            for stages in (2, 3, 4):
                name = f"block={block} w={warps} hints=True reverse=True stages={stages}"
                variant = functools.partial(
                    wide_forward.launch, x, w, EPS, block, warps, True, True, stages
                )
                record(name, variant)
        x = w = ref = None


def part_splitfwd(rows):
    """Forward of wide rows in graph mode: the default beside wide_forward.py's split-row kernel
    (SPLIT cooperating programs per row, the slice kept in registers: x read once), SPLIT x
    warps, its output checked against F.rms_norm and for bitwise repeats."""
    import wide_forward

    for m, n in WIDE_FWD:
        x, w, ref, gb = _wide_inputs(m, n)
        variants = [("default", lambda: ops.launch_forward(x, w, None, EPS, 0.0, x.dtype))]  # noqa: B023
        for split in (2, 4, 8, 16, 32):
            block = triton.next_power_of_2(triton.cdiv(n, split))
            for warps in (4, 8, 16, 32):
                if not 8 <= block // (32 * warps) <= 64:
                    continue
                fn = functools.partial(wide_forward.launch_split, x, w, EPS, split, warps)
                variants.append((f"split={split} block={block} w={warps}", fn))
        for name, fn in variants:
            r = dict(part="splitfwd", M=m, N=n, variant=name)
            try:
                y0 = fn()[0]
                err = (y0.float() - ref).abs().max().item()
                same = bool(torch.equal(fn()[0], y0))
                us = graph_us(fn)
                r.update(us=us, GBps=gb / us * 1e6, max_err=err, repeat_equal=same)
            except Exception as e:  # noqa: BLE001
                r["error"] = repr(e)[:300]
            rows.append(r)
            print(json.dumps(r), flush=True)
        x = w = ref = None


def part_coopfwd(rows):
    """Forward of wide rows: the default beside wide_forward.py's cooperative split-row kernel
    (a persistent grid launched with ``launch_cooperative_grid=True``, so the programs that wait
    on each other are all running): SPLIT x warps x programs per SM. Timed in graph mode and,
    in case a cooperative launch cannot be captured, with CUDA events (do_bench, L2 flushed)."""
    import wide_forward

    for m, n in WIDE_FWD:
        x, w, ref, gb = _wide_inputs(m, n)
        variants = [("default", lambda: ops.launch_forward(x, w, None, EPS, 0.0, x.dtype))]  # noqa: B023
        for split in (2, 4, 8, 16):
            block = triton.next_power_of_2(triton.cdiv(n, split))
            for warps in (4, 8, 16, 32):
                if not 8 <= block // (32 * warps) <= 64:
                    continue
                for per_sm in (1, 2, 4):
                    fn = functools.partial(
                        wide_forward.launch_split_coop, x, w, EPS, split, warps, per_sm
                    )
                    variants.append((f"coop split={split} w={warps} per_sm={per_sm}", fn))
        for name, fn in variants:
            r = dict(part="coopfwd", M=m, N=n, variant=name)
            try:
                y0 = fn()[0]
                r.update(
                    max_err=(y0.float() - ref).abs().max().item(),
                    repeat_equal=bool(torch.equal(fn()[0], y0)),
                )
                us = 1e3 * ms_bench(fn)
                r.update(us_events=us, GBps_events=gb / us * 1e6)
                us = graph_us(fn)
                r.update(us=us, GBps=gb / us * 1e6)
            except Exception as e:  # noqa: BLE001 - a refused launch or capture: recorded
                r["error"] = repr(e)[:300]
            rows.append(r)
            print(json.dumps(r), flush=True)
        x = w = ref = None


#: Shapes of part persistfwd: one-row forward widths (64M elements each, bf16) where a peer led
#: (bench 2026-11-30, session 24: 2048 x 32768 74.2 us vs quack 65.8; 16384 x 4096 65.6 vs Liger
#: 64.5), and 4096 rows of 4096 (small M).
PERSIST_FWD = [(2048, 32768), (4096, 16384), (8192, 8192), (16384, 4096), (4096, 4096)]


def part_persistfwd(rows):
    """Forward in graph mode: the default (one program per row) beside persistent_forward.py's
    persistent, pipelined row loop: warps x stages x programs per SM."""
    import persistent_forward

    for m, n in PERSIST_FWD:
        x, w, ref, gb = _wide_inputs(m, n)
        variants = [("default", lambda: ops.launch_forward(x, w, None, EPS, 0.0, x.dtype))]  # noqa: B023
        base = _row_warps(n)
        for warps in sorted({max(4, base // 2), base, min(32, base * 2)}):
            for stages in (1, 2, 3):
                for per_sm in (1, 2, 4):
                    fn = functools.partial(
                        persistent_forward.launch, x, w, EPS, warps, stages, per_sm
                    )
                    variants.append((f"persist w={warps} stages={stages} per_sm={per_sm}", fn))
        for name, fn in variants:
            r = dict(part="persistfwd", M=m, N=n, variant=name)
            try:
                r.update(max_err=(fn()[0].float() - ref).abs().max().item())
                us = graph_us(fn)
                r.update(us=us, GBps=gb / us * 1e6)
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory: recorded
                r["error"] = repr(e)[:300]
            rows.append(r)
            print(json.dumps(r), flush=True)
        x = w = ref = None


#: Shapes of part tmafwd: the forward's gap to Liger / quack at common widths (bench
#: 2026-12-01b: 4096 x 4096 bf16 0.94x, 16384 x 4096 0.96x, 16384 x 4096 fp16 / fp32 0.97x).
TMA_FWD = [
    (4096, 4096, torch.bfloat16),
    (8192, 4096, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (16384, 2048, torch.bfloat16),
    (65536, 1024, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (16384, 4096, torch.float32),
]


def part_tmafwd(rows):
    """Forward in graph mode: the default beside tma_forward.py's persistent descriptor (TMA)
    loop, rows per tile (2-16 KB tiles) x stages x warps x programs per SM."""
    _tma_fwd_sweep(rows, "tmafwd", TMA_FWD, (1, 2, 4, 8), (1, 2), True)


#: Shapes of part tmafwdnarrow: the bench's narrow curve points, where quack leads the forward
#: (bench h200_2026-12-04d, bf16: 1048576 x 64 67.8 us vs 64.5, 524288 x 128 68.2 vs 64.5,
#: 262144 x 256 65.4 vs 64.5, 131072 x 512 65.3 vs compile 65.0). Env ``TMA_FWD_NARROW="MxN,..."``
#: replaces them (bf16).
TMA_FWD_NARROW = [(1048576, 64), (524288, 128), (262144, 256), (131072, 512)]
if os.environ.get("TMA_FWD_NARROW"):
    TMA_FWD_NARROW = [
        tuple(map(int, item.split("x"))) for item in os.environ["TMA_FWD_NARROW"].split(",")
    ]


def part_tmafwdnarrow(rows):
    """part tmafwd on short bf16 rows (TMA_FWD_NARROW), as the bench times the forward (inference:
    no rstd stored), rows per tile 8-256 (2-16 KB) x stages x warps x 1 / 2 / 4 programs per SM."""
    shapes = [(m, n, torch.bfloat16) for m, n in TMA_FWD_NARROW]
    _tma_fwd_sweep(rows, "tmafwdnarrow", shapes, (8, 16, 32, 64, 128, 256), (1, 2, 4), False)


#: Shapes of part narrowfwd: the several-rows forward where quack leads (bench h200_2026-12-04d,
#: inference: 1048576 x 64 67.8 us vs 64.5, 524288 x 128 68.2 vs 64.5, 262144 x 256 65.4 vs
#: 64.5). Env ``NARROW_FWD="MxN,..."`` replaces them, ``NARROW_FWD_DTYPE`` (default bfloat16)
#: sets their dtype, ``NARROW_FWD_RSTD=1`` times the training forward (rstd stored).
NARROW_FWD = [(1048576, 64), (524288, 128), (262144, 256)]
if os.environ.get("NARROW_FWD"):
    NARROW_FWD = [tuple(map(int, item.split("x"))) for item in os.environ["NARROW_FWD"].split(",")]
NARROW_FWD_DTYPE = getattr(torch, os.environ.get("NARROW_FWD_DTYPE", "bfloat16"))
NARROW_FWD_RSTD = os.environ.get("NARROW_FWD_RSTD") == "1"
#: Configs timed beside the sweep's, ``"block:rows:warps;..."`` (env NARROW_FWD_EXTRA): e.g. the
#: heuristic before a change.
NARROW_FWD_EXTRA = [
    ForwardConfig(*map(int, item.split(":")))
    for item in os.environ.get("NARROW_FWD_EXTRA", "").split(";")
    if item
]


def part_narrowfwd(rows):
    """The several-rows forward on short rows (NARROW_FWD, NARROW_FWD_DTYPE), inference (no
    rstd; NARROW_FWD_RSTD=1: stored), as the bench times it: rows per program (tiles of
    512-32768 values) x warps beside the default and NARROW_FWD_EXTRA; then
    the default, the extras and each shape's 3 fastest again, 3 interleaved rounds (median)."""
    for m, n in NARROW_FWD:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=NARROW_FWD_DTYPE)
        w = torch.randn(n, device="cuda", dtype=NARROW_FWD_DTYPE)
        ref = F.rms_norm(x.float(), (n,), w.float(), EPS)
        block = triton.next_power_of_2(n)
        configs = [None, *(c for c in NARROW_FWD_EXTRA if c.block == block)]
        for tile_rows in (4, 8, 16, 32, 64, 128, 256, 512):
            for warps in (1, 2, 4, 8, 16):
                if 512 <= tile_rows * block <= 32768 and tile_rows * block >= 256 * warps:
                    configs.append(ForwardConfig(block, tile_rows, warps))
        timed = {}
        for cfg in configs:
            name = "default" if cfg is None else f"rows={cfg.rows} w={cfg.num_warps}"
            r = dict(part="narrowfwd", M=m, N=n, variant=name, config=repr(cfg))
            r["dtype"], r["rstd"] = str(x.dtype), NARROW_FWD_RSTD
            fn = functools.partial(
                ops.launch_forward,
                x, w, None, EPS, 0.0, x.dtype, keep_rstd=NARROW_FWD_RSTD, config=cfg,
            )  # fmt: skip
            try:
                r.update(max_err=(fn()[0].float() - ref).abs().max().item())
                r.update(us=graph_us(fn))
                r["GBps"] = 2 * m * n * x.element_size() / r["us"] / 1e3
                timed[name] = (fn, r["us"])
            except Exception as e:  # noqa: BLE001 - keep sweeping, record why
                r["error"] = repr(e)[:300]
            rows.append(r)
            print(json.dumps(r), flush=True)
        best = sorted((k for k in timed if k != "default"), key=lambda k: timed[k][1])[:3]
        extra = [f"rows={c.rows} w={c.num_warps}" for c in NARROW_FWD_EXTRA if c.block == block]
        again = {k: [] for k in dict.fromkeys(["default", *extra, *best]) if k in timed}
        for _ in range(3):
            for k in again:
                again[k].append(graph_us(timed[k][0]))
        for k, us_all in again.items():
            r = dict(part="narrowfwd", M=m, N=n, variant=f"{k} again", runs=us_all)
            r["us"] = sorted(us_all)[1]
            rows.append(r)
            print(json.dumps(r), flush=True)
        x = w = ref = None


def _tma_fwd_sweep(rows, part, shapes, tile_rows_all, per_sms, store_rstd):
    """tma_forward.py's variants against the default forward (``store_rstd`` for both)."""
    import tma_forward

    for m, n, dtype in shapes:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        ref = F.rms_norm(x.float(), (n,), w.float(), EPS)
        if store_rstd:
            _fwd_record(rows, part, m, n, f"default {dtype}", x, w, None)
        else:
            r = dict(part=part, M=m, N=n, variant=f"default {dtype} no rstd")
            fn = functools.partial(
                ops.launch_forward, x, w, None, EPS, 0.0, x.dtype, keep_rstd=False
            )
            r.update(max_err=(fn()[0].float() - ref).abs().max().item())
            us = graph_us(fn)
            r.update(us=us, GBps=2 * m * n * x.element_size() / us / 1e3)
            rows.append(r)
            print(json.dumps(r), flush=True)
        s = x.element_size()
        for tile_rows in [r for r in tile_rows_all if 2048 <= r * n * s <= 16384]:
            for stages in (2, 3, 4):
                for warps in (4, 8):
                    for per_sm in per_sms:
                        name = f"tma {dtype} rows={tile_rows} stages={stages} w={warps}"
                        r = dict(part=part, M=m, N=n, variant=f"{name} per_sm={per_sm}")
                        fn = functools.partial(
                            tma_forward.launch,
                            x,
                            w,
                            EPS,
                            tile_rows,
                            warps,
                            stages,
                            per_sm,
                            store_rstd,
                        )
                        try:
                            r.update(max_err=(fn()[0].float() - ref).abs().max().item())
                            us = graph_us(fn)
                            r.update(us=us, GBps=2 * m * n * s / us / 1e3)
                        except Exception as e:  # noqa: BLE001 - e.g. out of shared memory
                            r["error"] = repr(e)[:300]
                        rows.append(r)
                        print(json.dumps(r), flush=True)
        x = w = ref = None


#: Shapes of part earlyw: one-pass forward widths where Liger, quack or compile lead by 1-4%
#: (bench, 2026-12-01: 16384 x 4096 bf16 65.5 vs Liger 64.6 us, fp32 131.5 vs compile 127.5).
EARLYW = [
    # small M, below the 4096 rows the order was first measured at: the thirteenth session's
    # bench had 1024 x 4096 at 4.6 us against 4.4 in the tenth's (a possible small-M regression)
    (1024, 4096, torch.bfloat16),
    (2048, 4096, torch.bfloat16),
    (4096, 4096, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (16384, 4096, torch.float16),
    (16384, 4096, torch.float32),
    (16384, 2048, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (8192, 16384, torch.bfloat16),
    (32768, 8192, torch.bfloat16),
]
#: Shapes of part earlyw's several-rows kernel (rows up to 1024 wide), where compile leads the
#: forward (bench, 2026-12-01: 65536 x 1024 66.0 vs 65.6 us; 131072 x 512 66.2 vs Inductor 64.9).
EARLYW_ROWS = [
    (65536, 1024, torch.bfloat16),
    (131072, 512, torch.bfloat16),
    (262144, 256, torch.bfloat16),
    (65536, 1024, torch.float32),
]
#: Rounds of part earlyw: every variant of a shape is timed once per round, in turn, so drift
#: between variants (1-2% between two timings of one shape) spreads over all of them.
EARLYW_ROUNDS = 3


def _earlyw_rounds(
    rows, m, n, dtype, x, variants, part="earlyw", atol=0.0, unchecked=("liger",), tols=None
):
    """Check every variant but the peers (``unchecked``) against the package's output (bit for
    bit with ``atol`` 0: the same reduction order; else within it; ``tols`` maps a variant to its
    own), then time all of them in EARLYW_ROUNDS interleaved rounds; record each round and the
    median."""
    import statistics

    y_ref = variants["default"]()[0]
    for name, fn in variants.items():
        if name not in unchecked:
            tol = (tols or {}).get(name, atol)
            err = (fn()[0].double() - y_ref.double()).abs().max().item()
            assert err <= tol, f"{name} differs from the package's kernel by {err}"
    times = {name: [] for name in variants}
    for _ in range(EARLYW_ROUNDS):
        for name, fn in variants.items():
            times[name].append(graph_us(fn))
    for name, ts in times.items():
        us = statistics.median(ts)
        r = dict(part=part, M=m, N=n, variant=f"{name} {dtype}", us=us, rounds=ts)
        r.update(GBps=2 * m * n * x.element_size() / us / 1e3)
        rows.append(r)
        print(json.dumps(r), flush=True)


def part_earlyw(rows):
    """Forward in graph mode: the package's one-row kernel beside early_weight_forward.py (the
    weight loaded with the row, before the reduction, with and without masks; and ``late``, the
    order the package had before) and Liger's forward, in interleaved rounds; records each round
    and the median. Then the several-rows kernel (EARLYW_ROWS) with the weight before or after
    the reduction."""
    import early_weight_forward

    from rmsnorm_kernel.cli.bench import peers

    liger = peers.build(["liger"], EPS)["liger"]
    for m, n, dtype in EARLYW:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        warps = _row_warps(triton.next_power_of_2(n))
        variants = {
            "default": functools.partial(ops.launch_forward, x, w, None, EPS, 0.0, x.dtype),
            "early": functools.partial(early_weight_forward.launch, x, w, EPS, warps, False),
            "early even": functools.partial(early_weight_forward.launch, x, w, EPS, warps, True),
            # the package's order before the twelfth session: weight after the reduction
            "late": functools.partial(early_weight_forward.launch, x, w, EPS, warps, False, False),
        }
        if callable(liger):
            variants["liger"] = functools.partial(liger, x, w)
        _earlyw_rounds(rows, m, n, dtype, x, variants)
        x = w = None
    for m, n, dtype in EARLYW_ROWS:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        cfg = config.forward_config(m, n, 0)
        assert cfg.rows > 0, f"{m}x{n} does not take the several-rows kernel"
        launch_rows = early_weight_forward.launch_rows
        variants = {
            "default": functools.partial(ops.launch_forward, x, w, None, EPS, 0.0, x.dtype),
            "rows early": functools.partial(launch_rows, x, w, EPS, cfg.rows, cfg.num_warps),
            "rows late": functools.partial(launch_rows, x, w, EPS, cfg.rows, cfg.num_warps, False),
        }
        if callable(liger):
            variants["liger"] = functools.partial(liger, x, w)
        _earlyw_rounds(rows, m, n, dtype, x, variants)
        x = w = None


#: Shapes of part tiny: the bench's smallest, latency-bound forward (bench 2026-12-01: 128 x 257
#: fp32 1.8 us against quack's and compile's 1.5, Liger 1.6), and a narrow 16-bit one beside it.
TINY = [(128, 257, torch.float32), (256, 1024, torch.bfloat16)]


def part_tiny(rows):
    """Forward in graph mode at TINY: the default beside explicit configs (the several-rows
    kernel at 1-4 rows x 1-8 warps, one row per program at 1-4 warps) and Liger's forward, in
    interleaved rounds. Other warp counts reduce in another order: each config is checked
    against the default within 8 units in the last place of the output's largest value."""
    from rmsnorm_kernel.cli.bench import peers

    liger = peers.build(["liger"], EPS)["liger"]
    for m, n, dtype in TINY:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        block = triton.next_power_of_2(n)
        launch = functools.partial(ops.launch_forward, x, w, None, EPS, 0.0, x.dtype)
        variants = {"default": launch}
        for warps in (1, 2, 4, 8):
            for tile_rows in (1, 2, 4):
                cfg = ForwardConfig(block, tile_rows, warps)
                variants[f"rows={tile_rows} w={warps}"] = functools.partial(launch, config=cfg)
            if warps <= 4:
                cfg = ForwardConfig(block, 0, warps)
                variants[f"one row w={warps}"] = functools.partial(launch, config=cfg)
        if callable(liger):
            variants["liger"] = functools.partial(liger, x, w)
        print(json.dumps(dict(part="tiny", M=m, N=n, default=repr(config.forward_config(m, n, 0)))))
        atol = 8 * torch.finfo(dtype).eps * launch()[0].abs().max().item()
        _earlyw_rounds(rows, m, n, dtype, x, variants, part="tiny", atol=atol)
        x = w = None


#: Shapes of part hints: where compile led the forward in the thirteenth session's bench (8192
#: columns: 32768 rows 251.0 us vs ours 261.9, 8192 rows 65.3 vs 67.8; 16384 x 4096 fp32 127.3
#: vs 130.6; 1024 x 4096 4.3 vs 4.6), and 4096 columns where Liger / quack led by ~1%.
HINTS = [
    (32768, 8192, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (16384, 4096, torch.float32),
    (16384, 4096, torch.bfloat16),
    (4096, 4096, torch.bfloat16),
    (1024, 4096, torch.bfloat16),
]


#: Part hintslast: Inductor's order of hints (its kernel at 8192 columns, kept by hints_h200.sh in
#: the fifteenth session: the row loaded evict_last, the weight evict_last, 16 warps), which
#: part hints did not time (its x hint was evict_first only), at the shapes compile leads.
HINTS_LAST = [
    (32768, 8192, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (16384, 4096, torch.float32),
]


def part_hintslast(rows):
    """Forward in graph mode at HINTS_LAST: the package's kernel beside hint_forward.py's with
    evict_last on x (alone, with evict_last on the weight, with a streaming store) at the
    default warps and at 16, and compile, in interleaved rounds (hints change no value: checked
    bit for bit at the default warps; 16 warps within 8 units in the last place)."""

    def hints(warps):
        for wp in sorted({warps, 16}):
            yield f"x last w={wp}", wp, "evict_last", "", ""
            yield f"x last w last w={wp}", wp, "evict_last", "evict_last", ""
            yield f"x last y cs w={wp}", wp, "evict_last", "", ".cs"

    _hint_rounds(rows, "hintslast", HINTS_LAST, hints)


def _hint_rounds(rows, part, shapes, hints):
    """Graph-mode rounds of hint_forward.py's kernel beside the package's one-row forward and
    the peers, at ``shapes`` ``(M, N, dtype)``. ``hints(warps)`` yields ``(name, warps, x_evict,
    w_evict, y_cache)`` for the default ``warps`` of the shape; variants at the default warps
    are checked bit for bit (hints change no value), other warps within 8 units in the last
    place of the largest value (another reduction order)."""
    import hint_forward

    for m, n, dtype in shapes:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        warps = _row_warps(triton.next_power_of_2(n))
        variants = {
            "default": functools.partial(ops.launch_forward, x, w, None, EPS, 0.0, x.dtype),
        }
        other_warps = set()
        for name, wp, *how in hints(warps):
            variants[name] = functools.partial(hint_forward.launch, x, w, EPS, wp, *how)
            if wp != warps:
                other_warps.add(name)
        variants.update(_peer_variants(x, w))
        atol = 8 * torch.finfo(dtype).eps * variants["default"]()[0].abs().max().item()
        tols = {name: atol for name in other_warps}
        _earlyw_rounds(
            rows, m, n, dtype, x, variants, part=part, unchecked=FORWARD_PEERS, tols=tols
        )
        x = w = None


def _as_tuple(fn, *args):
    """A peer's forward as ``(y,)``: _earlyw_rounds reads ``fn()[0]``."""
    return (fn(*args),)


#: The peers parts hints and packed time beside the variants (never checked against ours).
FORWARD_PEERS = ("liger", "compile")


def _peer_variants(x, w) -> dict:
    """Liger's and compile's forwards of ``x, w`` as variants returning ``(y,)``, compiled afresh
    for this shape (as the bench does); a peer that is not installed is left out."""
    from rmsnorm_kernel.cli.bench import peers

    torch._dynamo.reset()
    built = peers.build(list(FORWARD_PEERS), EPS)
    ready = {name: fn for name, fn in built.items() if callable(fn)}
    return {name: functools.partial(_as_tuple, fn, x, w) for name, fn in ready.items()}


def part_hints(rows):
    """Forward in graph mode at HINTS: the package's one-row kernel beside hint_forward.py's
    (the same kernel with eviction policies on the loads and a cache modifier on the store, each
    alone and together), the plain kernel at half and twice the warps, and compile and Liger, in
    interleaved rounds. Hints change no value: those variants are checked bit for bit; other
    warp counts reduce in another order (within 8 units in the last place of the largest)."""

    def hints(warps):
        yield "plain", warps, "", "", ""
        yield "x first", warps, "evict_first", "", ""
        yield "w last", warps, "", "evict_last", ""
        yield "y cs", warps, "", "", ".cs"
        yield "x first w last", warps, "evict_first", "evict_last", ""
        yield "x first y cs", warps, "evict_first", "", ".cs"
        yield "all", warps, "evict_first", "evict_last", ".cs"
        for other in (warps // 2, warps * 2):
            yield f"plain w={other}", other, "", "", ""
            yield f"x first w last w={other}", other, "evict_first", "evict_last", ""

    _hint_rounds(rows, "hints", HINTS, hints)


#: Shapes of part packed (bf16): the wide rows where quack leads the forward (65536 columns:
#: 0.72x; 32768: 0.88x, bench 2026-12-01) and the widths where the package's one-pass kernel
#: holds many float32 registers per thread (8192 columns at 4 warps: 128; 16384 at 8: 127).
PACKED = [
    (4096, 65536),
    (1024, 65536),
    (2048, 32768),
    (8192, 16384),
    (32768, 8192),
    (8192, 8192),
    (16384, 4096),
    (4096, 4096),
]


def part_packed(rows):
    """Forward in graph mode at PACKED: the package's kernel beside packed_forward.py's one-pass
    kernel (the row kept 16-bit in registers, widened twice) at the warp counts that give 16-64
    values per thread, with the weight loaded early or late, its cast-twice form at the default
    warps, and compile and Liger, in interleaved rounds. Another reduction order than the
    package's: each variant is checked within 8 units in the last place of the largest value."""
    import packed_forward

    for m, n in PACKED:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        packed = functools.partial(packed_forward.launch, x, w, EPS)
        variants = {
            "default": functools.partial(ops.launch_forward, x, w, None, EPS, 0.0, x.dtype),
        }
        for warps in (4, 8, 16, 32):
            if 16 <= n // (32 * warps) <= 64:
                for early in (False, True):
                    variants[f"packed w={warps} early_w={early}"] = functools.partial(
                        packed, warps, True, early
                    )
        warps = config.forward_config(m, n, 0).num_warps
        variants[f"packed cast w={warps}"] = functools.partial(packed, warps, False)
        variants.update(_peer_variants(x, w))
        atol = 8 * torch.finfo(x.dtype).eps * variants["default"]()[0].abs().max().item()
        _earlyw_rounds(rows, m, n, x.dtype, x, variants, "packed", atol, unchecked=FORWARD_PEERS)
        x = w = None


#: Shapes of part fwdpkg: (M, N, dtype, residual). The package's packed pass at the widths it
#: takes (bf16 65536 / 32768, several M; float16 and a residual keep the old passes), and its
#: unmasked pass over rows exactly one block wide, from small M to past UNMASKED_MAX_ROWS.
FWDPKG = [
    (4096, 65536, torch.bfloat16, False),
    (1024, 65536, torch.bfloat16, False),
    (512, 65536, torch.bfloat16, False),
    (4096, 65536, torch.float16, False),
    (1024, 65536, torch.bfloat16, True),
    (4096, 32768, torch.bfloat16, False),
    (2048, 32768, torch.bfloat16, False),
    (1024, 32768, torch.bfloat16, False),
    (256, 4096, torch.bfloat16, False),
    (1024, 4096, torch.bfloat16, False),
    (2048, 4096, torch.bfloat16, False),
    (4096, 4096, torch.bfloat16, False),
    (8192, 4096, torch.bfloat16, False),
    (16384, 4096, torch.bfloat16, False),
    (4096, 4096, torch.float32, False),
    (2048, 4096, torch.bfloat16, True),
    (2048, 2048, torch.bfloat16, False),
    (4096, 2048, torch.bfloat16, False),
    (1024, 8192, torch.bfloat16, False),
    (4096, 8192, torch.bfloat16, False),
    (8192, 8192, torch.bfloat16, False),
    (1024, 16384, torch.bfloat16, False),
    (4096, 16384, torch.bfloat16, False),
    (8192, 16384, torch.bfloat16, False),
]


def _fwd_with(x, w, res, dtype, cfg):
    return functools.partial(ops.launch_forward, x, w, res, EPS, 0.0, dtype, config=cfg)


#: Part reread: where compile leads the one-row forward (bench, fifteenth session: 32768 x 8192
#: bf16 250.5 us against 260.2). Inductor's kernel there (its generated source, kept by
#: hints_h200.sh) reads the row twice, the first load evict_last and the second evict_first
#: (R0_BLOCK 8192, 16 warps): registers hold only the sum, and the second read hits L1/L2.
REREAD = [
    (32768, 8192, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (16384, 4096, torch.float32),
]


def part_reread(rows):
    """Forward in graph mode at REREAD: the heuristic's one pass against the package's chunked
    pass (the row read twice) in two or four chunks at 4-16 warps, the one pass at 16 warps,
    and compile and Liger, in interleaved rounds (another reduction order: within 8 units in
    the last place of the largest value)."""
    for m, n, dtype in REREAD:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        run = functools.partial(_fwd_with, x, w, None, dtype)
        cfg = config.forward_config(m, n, 0, False, dtype if x.element_size() == 2 else None)
        variants = {"default": run(cfg), "one pass w=16": run(ForwardConfig(n, 0, 16))}
        for chunk in (n // 2, n // 4):
            for warps in (4, 8, 16):
                variants[f"chunks of {chunk} w={warps}"] = run(ForwardConfig(chunk, 0, warps))
        variants.update(_peer_variants(x, w))
        atol = 8 * torch.finfo(dtype).eps * variants["default"]()[0].abs().max().item()
        _earlyw_rounds(rows, m, n, dtype, x, variants, "reread", atol, unchecked=FORWARD_PEERS)
        x = w = None


#: Part fwdpkg16: float16 at the packed widths (measured before the heuristic packed float16).
FWDPKG16 = [
    (4096, 65536, torch.float16, False),
    (1024, 65536, torch.float16, False),
    (2048, 32768, torch.float16, False),
]


def part_fwdpkg16(rows):
    part_fwdpkg(rows, FWDPKG16)


def part_fwdpkg(rows, shapes=FWDPKG):
    """Forward in graph mode at FWDPKG, through the package's launcher with explicit configs: the
    heuristic's choice (``default``), the same with ``packed`` / ``unmasked`` switched, the
    geometry of before (the chunked pass at 65536 columns, 32 warps at 32768), the packed pass
    at other warps, and compile and Liger (without a residual), in interleaved rounds. The packed
    and unmasked switches change no value (checked bit for bit); other geometries reduce in
    another order (within 8 units in the last place of the largest)."""
    for m, n, dtype, with_res in shapes:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        res = torch.randn(m, n, device="cuda", dtype=dtype) if with_res else None
        half = x.element_size() == 2
        cfg = config.forward_config(m, n, 0, False, dtype if half and not with_res else None)
        print(json.dumps(dict(part="fwdpkg", M=m, N=n, default=repr(cfg))), flush=True)

        run = functools.partial(_fwd_with, x, w, res, dtype)

        variants = {"default": run(cfg)}
        exact = set()
        if cfg.rows == 0 and cfg.block >= n:
            if half:
                variants[f"packed={not cfg.packed}"] = run(
                    dataclasses.replace(cfg, packed=not cfg.packed)
                )
                exact.add(f"packed={not cfg.packed}")
            if cfg.block == n:
                variants[f"unmasked={not cfg.unmasked}"] = run(
                    dataclasses.replace(cfg, unmasked=not cfg.unmasked)
                )
                exact.add(f"unmasked={not cfg.unmasked}")
        if n == 65536:
            variants["chunked 16384 w=32"] = run(ForwardConfig(16384, 0, 32))
        widths = config.PACKED_FORWARD.get(dtype, {})
        if half and not cfg.packed and n in widths:  # with a residual
            warps, _ = widths[n]
            for free in (False, True):
                variants[f"packed w={warps} unmasked={free}"] = run(
                    ForwardConfig(n, 0, warps, packed=True, unmasked=free)
                )
        if n == 32768:
            variants["one pass w=32"] = run(ForwardConfig(32768, 0, 32))
        if cfg.packed:
            for warps in (cfg.num_warps // 2, cfg.num_warps * 2):
                if 16 <= n // (32 * warps) <= 64 and warps <= 32:
                    for free in (False, True):  # (float16's best at 32768: 32 warps, unmasked)
                        variants[f"packed w={warps} unmasked={free}"] = run(
                            dataclasses.replace(cfg, num_warps=warps, unmasked=free)
                        )
        if res is None:
            variants.update(_peer_variants(x, w))
        atol = 8 * torch.finfo(dtype).eps * variants["default"]()[0].abs().max().item()
        tols = {name: 0.0 for name in exact}
        label = f"{dtype} residual" if with_res else str(dtype)  # (the variants' names)
        _earlyw_rounds(
            rows, m, n, label, x, variants, "fwdpkg", atol, unchecked=FORWARD_PEERS, tols=tols
        )
        x = w = res = None


#: Shapes of part tmabwd: where quack leads the fwd+bwd (bench 2026-11-30, session 24: 65536 x
#: 1024 0.91x, 16384 x 4096 fp32 0.97x, bf16 1.02x) and 512 / 2048 columns for comparison.
TMA_BWD = [
    (65536, 1024, torch.bfloat16),
    (131072, 512, torch.bfloat16),
    (16384, 2048, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (16384, 4096, torch.float32),
]


def part_tmabwd(rows):
    """Backward alone in graph mode: the default beside tma_backward.py's descriptor (TMA)
    kernel, rows per step x warps x stages x programs per SM; each variant's dx and dweight
    against the default's (max abs difference, dweight relative)."""
    import tma_backward

    for m, n, dtype in TMA_BWD:
        x, w, dy, rstd, _ = _bwd_inputs(m, n, dtype)
        base = backward_config(m, n, 0, itemsize=dtype.itemsize)
        dx0, dw0 = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=base)
        variants = [("default", lambda: ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype))]  # noqa: B023
        for tile_rows in (1, 2, 4):
            if tile_rows * n > 4096:
                continue
            for warps in (4, 8):
                for stages in (2, 3, 4):
                    for per_sm in (1, 2) if n >= 4096 else (2, 4, 8):
                        fn = functools.partial(
                            tma_backward.launch, dy, x, w, rstd, tile_rows, warps, stages, per_sm
                        )
                        name = f"tma rows={tile_rows} w={warps} stages={stages} per_sm={per_sm}"
                        variants.append((name, fn))
        for name, fn in variants:
            r = dict(part="tmabwd", M=m, N=n, dtype=str(dtype), variant=name)
            try:
                dx, dw = fn()
                r.update(
                    dx_diff=(dx.float() - dx0.float()).abs().max().item(),
                    dw_rel_diff=(
                        (dw.float() - dw0.float()).abs().max() / dw0.float().abs().max()
                    ).item(),
                )
                us = graph_us(fn)
                r.update(us=us, GBps=3 * m * n * x.element_size() / us / 1e3)
            except Exception as e:  # noqa: BLE001 - a refused descriptor or compile: recorded
                r["error"] = repr(e)[:300]
            rows.append(r)
            print(json.dumps(r), flush=True)
        x = w = dy = rstd = dx0 = dw0 = None


#: Shapes of part ctas (64M bf16 elements each, and quack's 4096 x 65536): wide rows where quack
#: leads the forward by 11-35% (bench 2026-11-30, session 24), and 16384 for comparison.
CTAS_FWD = [
    (4096, 16384),
    (2048, 32768),
    (1024, 65536),
    (4096, 65536),
    (512, 131072),
    (256, 262144),
]
CTAS_BWD = [(4096, 16384), (2048, 32768), (1024, 65536), (4096, 65536)]


#: Shapes of part tmapkg: the BWD_TMA widths from 4096 rows to the measured M, and fp32 4096 wider.
TMA_PKG = [
    (m, n, dtype)
    for n, dtype in ((512, torch.bfloat16), (1024, torch.bfloat16), (4096, torch.float32))
    for m in (4096, 8192, 16384, 32768, 65536, 131072)
    if m * n <= 1 << 27
]


def _tma_against_pointer(rows, part, shapes, plans):
    """For each (M, N, dtype): the TMA backward with ``plans[(N, itemsize)]`` against the
    pointer heuristic, backward alone in graph mode."""
    for m, n, dtype in shapes:
        inputs = _bwd_inputs(m, n, dtype)
        s = dtype.itemsize
        variants = {
            "pointer": backward_config(m, n, 0, itemsize=s),
            "tma": config._tma_backward_config(m, n, 0, plans[(n, s)], None),
        }
        for name, cfg in variants.items():
            _bwd_record(rows, part, m, n, f"{name} {dtype}", cfg, inputs)
        inputs = None


def part_tmapkg(rows):
    """The package's backward heuristic with the TMA kernel (``backward_config(..., tma=True)``,
    whatever TMA_MIN_M says) against the same heuristic without it, backward alone in graph mode,
    from 4096 rows up: where TMA_MIN_M should sit."""
    _tma_against_pointer(rows, "tmapkg", TMA_PKG, config.BWD_TMA)


#: Part tmacand: the best plan (rows per step, programs per SM, stages, warps) of each width part
#: tmasweep gained on (H200, 2026-12-01, experiments/kernel_perf/results/h200_2026-12-01):
#: 8192 bf16 110.6 vs 119.5 us, 1024 fp32 207.6 vs 222.1, 4096 bf16 111.7 vs 114.4 (the seventh
#: session's sweep had it as noise), 512 fp32 213.8 vs 217.3; each at one M only.
TMA_CAND = {
    (8192, 2): (1, 1, 3, 8),
    (1024, 4): (1, 2, 4, 4),
    (4096, 2): (1, 1, 4, 4),
    (512, 4): (1, 4, 4, 4),
}
TMA_CAND_SHAPES = [
    (m, n, torch.bfloat16 if s == 2 else torch.float32)
    for n, s in TMA_CAND
    for m in (4096, 8192, 16384, 32768, 65536, 131072)
    if m * n <= 1 << 27
]


def part_tmacand(rows):
    """TMA_CAND's plans against the pointer heuristic over M (as tmapkg does for BWD_TMA): the
    check before a plan joins BWD_TMA."""
    _tma_against_pointer(rows, "tmacand", TMA_CAND_SHAPES, TMA_CAND)


#: Shapes of part ctaspkg: the cluster widths of the heuristics (FWD_CLUSTERS, BWD_CLUSTERS) at
#: several M and both 16-bit and float32 rows, plus a row width that pads to the same block.
CTAS_PKG_FWD = [(m, 65536, d) for m in (512, 1024, 4096) for d in (torch.bfloat16, torch.float32)]
CTAS_PKG_FWD += [(1024, 40000, torch.bfloat16)]
CTAS_PKG_BWD = [(m, 32768, d) for m in (1024, 2048, 8192) for d in (torch.bfloat16, torch.float32)]
CTAS_PKG_BWD += [(2048, 20000, torch.bfloat16)]


def part_ctaspkg(rows):
    """The heuristics' cluster configs against the one-CTA configs they replace (the same
    heuristics with TRITON_VERSION set below CLUSTERS_MIN_TRITON), graph replay."""
    import unittest.mock

    def one_cta(fn, *args, **kwargs):
        with unittest.mock.patch.object(config, "TRITON_VERSION", (3, 6)):
            config.forward_config.cache_clear()
            config.backward_config.cache_clear()
            out = fn(*args, **kwargs)
        config.forward_config.cache_clear()
        config.backward_config.cache_clear()
        return out

    for m, n, dtype in CTAS_PKG_FWD:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        for name, cfg in (
            ("clusters", config.forward_config(m, n, 0)),
            ("one CTA", one_cta(config.forward_config, m, n, 0)),
        ):
            _fwd_record(rows, "ctaspkg", m, n, f"fwd {name} {dtype}", x, w, cfg)
        x = w = None
    for m, n, dtype in CTAS_PKG_BWD:
        inputs = _bwd_inputs(m, n, dtype)
        s = dtype.itemsize
        for name, cfg in (
            ("clusters", backward_config(m, n, 0, itemsize=s)),
            ("one CTA", one_cta(backward_config, m, n, 0, itemsize=s)),
        ):
            _bwd_record(rows, "ctaspkg", m, n, f"bwd {name} {dtype}", cfg, inputs)
        inputs = None


#: Shapes of part tmasweep: widths the TMA backward does not take yet (BWD_TMA), at M x N = 64M.
#: ``TMA_SWEEP="MxN:dtype,..."`` in the environment replaces them (e.g. one width over several M).
TMA_SWEEP = [
    (262144, 256, torch.bfloat16),
    (32768, 2048, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (65536, 1024, torch.float32),
    (131072, 512, torch.float32),
]
if os.environ.get("TMA_SWEEP"):
    TMA_SWEEP = [
        (int(shape.split("x")[0]), int(shape.split("x")[1]), getattr(torch, dtype))
        for shape, dtype in (item.split(":") for item in os.environ["TMA_SWEEP"].split(","))
    ]


def part_tmasweep(rows):
    """The package's TMA backward (explicit ``BackwardConfig(tma=True)``) at the widths it does
    not take yet: rows per step x stages x warps x programs per SM, beside the default."""
    for m, n, dtype in TMA_SWEEP:
        inputs = _bwd_inputs(m, n, dtype)
        _bwd_record(
            rows,
            "tmasweep",
            m,
            n,
            f"default {dtype}",
            backward_config(m, n, 0, itemsize=dtype.itemsize),
            inputs,
        )
        per_sms = (4, 8) if n <= 512 else (2, 4) if n <= 2048 else (1, 2)
        for tile_rows in (1, 2, 4):
            if tile_rows * n > 4096 and tile_rows > 1:
                continue
            for stages in (3, 4):
                for warps in (4, 8):
                    for per_sm in per_sms:
                        cfg = config._tma_backward_config(
                            m, n, 0, (tile_rows, per_sm, stages, warps), None
                        )
                        name = f"tma rows={tile_rows} st={stages} w={warps} per_sm={per_sm} {dtype}"
                        _bwd_record(rows, "tmasweep", m, n, name, cfg, inputs)
        inputs = None


#: Shapes of part tmadeep: where the backward still misses issue 17's 1.05x quack (bench
#: 2026-12-02c: 16384 x 4096 bf16 / fp16 / fp32 1.046x / 1.04x / 1.009x, 65536 x 1024 0.98x),
#: and 4096 x 4096 / 8192 x 4096, which share 16384 x 4096's plan.
TMA_DEEP = [
    (16384, 4096, torch.bfloat16),
    (65536, 1024, torch.bfloat16),
    (16384, 4096, torch.float32),
    (8192, 4096, torch.bfloat16),
    (4096, 4096, torch.bfloat16),
]


def _deep_plans(n, itemsize):
    """(rows, per_sm, stages, warps) around BWD_TMA's plan: the sweeps so far stopped at 4
    stages, and 16384 x 4096 bf16 went from 127.9 us at 3 to 111.7 at 4 (tmasweep)."""
    rows, per_sm, stages, warps = config.BWD_TMA[(n, itemsize)]
    plans = [
        (rows, per_sm, s, w) for s in (stages, 4, 5, 6, 8) for w in (warps, 8 if warps == 4 else 4)
    ]
    if n == 1024:
        plans = [(r, p, s, 4) for r in (2, 4) for p in (2, 3) for s in (4, 6, 8)]
    # Each stage holds a (rows, N) tile of x and of dy: keep a program within ~200 KB of shared
    # memory (the H200 has 227 KB per SM).
    fits = [p for p in plans if p[2] * 2 * p[0] * n * itemsize <= 200 << 10]
    return list(dict.fromkeys(fits))


def _tma_heuristic(rows, part, m, n, dtype):
    """Inputs of one shape and the heuristic's backward (the TMA one where it applies), timed
    and recorded: ``(inputs, its config, its dx)``, the dx the variants are checked against."""
    inputs = _bwd_inputs(m, n, dtype)
    x, w, dy, rstd, _ = inputs
    base = backward_config(m, n, 0, itemsize=dtype.itemsize, tma=True)
    dx0 = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=base)[0]
    _bwd_record(rows, part, m, n, f"heuristic {dtype}", base, inputs, dx0)
    return inputs, base, dx0


def part_tmadeep(rows):
    """The package's TMA backward with deeper pipelines (more stages) around BWD_TMA's plans,
    backward alone in graph mode, the heuristic timed first and last (drift); dx against the
    heuristic's (the same per-row math: expected 0)."""
    for m, n, dtype in TMA_DEEP:
        inputs, base, dx0 = _tma_heuristic(rows, "tmadeep", m, n, dtype)
        for plan in _deep_plans(n, dtype.itemsize):
            cfg = config._tma_backward_config(m, n, 0, plan, None)
            name = "tma rows={} per_sm={} st={} w={} ".format(*plan) + str(dtype)
            _bwd_record(rows, "tmadeep", m, n, name, cfg, inputs, dx0)
        _bwd_record(rows, "tmadeep", m, n, f"heuristic again {dtype}", base, inputs, dx0)
        inputs = dx0 = None


def _stride_ms(n):
    """Part tmastride's M for a BWD_TMA width: from TMA_MIN_M up to M x N = 64M values."""
    cap = (64 << 20) // n
    return sorted({m for m in (config.TMA_MIN_M, 16384, 65536, 131072) if m <= cap} | {cap})


def _stride_plans(n, itemsize):
    """(rows, per_sm, stages, warps) for the grid-stride deal around BWD_TMA's plan: programs
    per SM x stages, the programs of one SM within ~200 KB of shared memory (x and dy tiles per
    stage; the H200 has 227 KB per SM)."""
    rows, per_sm, stages, warps = config.BWD_TMA[(n, itemsize)]
    plans = [
        (rows, p, s, warps)
        for p in (per_sm, per_sm + 1, 2 * per_sm, 3 * per_sm)
        for s in (stages, 3, 4)
    ]
    fits = [p for p in plans if p[2] * 2 * p[0] * n * itemsize * p[1] <= 200 << 10]
    return list(dict.fromkeys(fits))


def part_tmastride(rows):
    """The TMA backward with its row tiles dealt grid-stride (``BackwardConfig.strided``) against
    the heuristic's contiguous blocks, at every BWD_TMA width over M, backward alone in graph
    mode (sum finish included), the heuristic timed first and last; dx against the heuristic's
    (the same per-row math: expected 0)."""
    for (n, itemsize), _plan in config.BWD_TMA.items():
        dtype = torch.bfloat16 if itemsize == 2 else torch.float32
        for m in _stride_ms(n):
            inputs = _bwd_inputs(m, n, dtype)
            x, w, dy, rstd, _ = inputs
            base = backward_config(m, n, 0, itemsize=itemsize, tma=True)
            dx0 = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=base)[0]
            _bwd_record(rows, "tmastride", m, n, f"heuristic {dtype}", base, inputs, dx0)
            for plan in _stride_plans(n, itemsize):
                cfg = config._tma_backward_config(m, n, 0, plan, None, strided=True)
                name = "strided rows={} per_sm={} st={} w={} ".format(*plan) + str(dtype)
                _bwd_record(rows, "tmastride", m, n, name, cfg, inputs, dx0)
            _bwd_record(rows, "tmastride", m, n, f"heuristic again {dtype}", base, inputs, dx0)
            inputs = x = w = dy = rstd = dx0 = None
            torch.cuda.empty_cache()


#: Shapes of part tmanew: widths BWD_TMA does not take, where the bench's fwd+bwd still trails
#: (twenty-sixth session, curves: 262144 x 256 bf16 0.98x quack, 0.95x compile), and float32
#: 512 (tmacand: 0.74-0.97x the pointers below 131072 rows with blocks). ``TMA_NEW="MxN:dtype,..."``
#: replaces them.
TMA_NEW = [(m, 256, torch.bfloat16) for m in (16384, 65536, 262144)]
TMA_NEW += [(m, 512, torch.float32) for m in (16384, 65536, 131072)]
if os.environ.get("TMA_NEW"):
    TMA_NEW = [
        (int(shape.split("x")[0]), int(shape.split("x")[1]), getattr(torch, dtype))
        for shape, dtype in (item.split(":") for item in os.environ["TMA_NEW"].split(","))
    ]


#: The deals part tmanew times each plan with: ``TMA_NEW_DEALS=strided`` (or ``blocks``) keeps one.
TMA_NEW_DEALS = [
    deal == "strided" for deal in os.environ.get("TMA_NEW_DEALS", "blocks,strided").split(",")
]


def _new_plans(n, itemsize):
    """(rows, per_sm, stages, warps) for part tmanew: tiles of 4-16 rows, 2-8 programs per SM
    (or ``TMA_NEW_PLANS``), the programs of one SM within ~200 KB of shared memory, as
    _stride_plans."""
    plans = [(r, p, s, 4) for r in (4, 8, 16) for p in (2, 4, 6, 8) for s in (3, 4)]
    if os.environ.get("TMA_NEW_PLANS"):  # "rows,per_sm,stages,warps;..." replaces them
        plans = [tuple(map(int, p.split(","))) for p in os.environ["TMA_NEW_PLANS"].split(";")]
    return [p for p in plans if p[2] * 2 * p[0] * n * itemsize * p[1] <= 200 << 10]


def part_tmanew(rows):
    """The TMA backward, both deals (blocks and grid-stride), at widths BWD_TMA does not take
    (TMA_NEW), against the heuristic (timed first and last), backward alone in graph mode with
    its sum finish; dx against the heuristic's (the same per-row math: expected 0)."""
    for m, n, dtype in TMA_NEW:
        inputs, base, dx0 = _tma_heuristic(rows, "tmanew", m, n, dtype)
        for plan in _new_plans(n, dtype.itemsize):
            for strided in TMA_NEW_DEALS:
                cfg = config._tma_backward_config(m, n, 0, plan, None, strided=strided)
                deal = "strided" if strided else "blocks"
                name = f"{deal} rows={{}} per_sm={{}} st={{}} w={{}} ".format(*plan) + str(dtype)
                _bwd_record(rows, "tmanew", m, n, name, cfg, inputs, dx0)
        _bwd_record(rows, "tmanew", m, n, f"heuristic again {dtype}", base, inputs, dx0)
        inputs = dx0 = None
        torch.cuda.empty_cache()


#: Shapes of part tmajoin: the float32 128 / 64 widths from TMA_MIN_M up
#: (``TMA_JOIN="MxN:dtype,..."`` replaces them).
TMA_JOIN = [(m, n, torch.float32) for n in (128, 64) for m in (4096, 16384, 65536, 262144)]
if os.environ.get("TMA_JOIN"):
    TMA_JOIN = [
        (int(shape.split("x")[0]), int(shape.split("x")[1]), getattr(torch, dtype))
        for shape, dtype in (item.split(":") for item in os.environ["TMA_JOIN"].split(","))
    ]


def part_tmajoin(rows):
    """The package's backward heuristic with TMA (``backward_config(..., tma=True)``) against the
    pointer heuristic (``tma=False``), the pointers timed first and last (drift), backward alone
    in graph mode with its finish; dx of both against the pointers' first."""
    for m, n, dtype in TMA_JOIN:
        inputs = _bwd_inputs(m, n, dtype)
        x, w, dy, rstd, _ = inputs
        s = dtype.itemsize
        pointer = backward_config(m, n, 0, itemsize=s)
        dx0 = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=pointer)[0]
        _bwd_record(rows, "tmajoin", m, n, f"pointer {dtype}", pointer, inputs, dx0)
        heuristic = backward_config(m, n, 0, itemsize=s, tma=True)
        _bwd_record(rows, "tmajoin", m, n, f"heuristic {dtype}", heuristic, inputs, dx0)
        _bwd_record(rows, "tmajoin", m, n, f"pointer again {dtype}", pointer, inputs, dx0)
        inputs = x = w = dy = rstd = dx0 = None
        torch.cuda.empty_cache()


def part_ctas(rows):
    """Thread-block clusters (``ForwardConfig.ctas`` / ``BackwardConfig.ctas``: Triton splits a
    program's row over ``ctas`` CTAs, meeting the reductions in distributed shared memory): the
    whole row in one pass, in the registers of a cluster, as quack does. Forward: ctas x warps,
    graph replay, beside the default. Backward alone: the one-tile kernel over a cluster (sum
    finish, float32 rows) x warps x programs per SM, beside the default (column tiles past
    16384)."""
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n in CTAS_FWD:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        _fwd_record(rows, "ctas", m, n, "fwd default", x, w, None)
        block = triton.next_power_of_2(n)
        for ctas in (1, 2, 4, 8):
            for warps in (8, 16, 32):
                if not 8 <= block // (ctas * warps * 32) <= 64:
                    continue
                cfg = ForwardConfig(block, 0, warps, ctas)
                _fwd_record(rows, "ctas", m, n, f"fwd ctas={ctas} w={warps}", x, w, cfg)
        x = w = None
    for m, n in CTAS_BWD:
        inputs = _bwd_inputs(m, n)
        base = backward_config(m, n, 0)
        _bwd_record(rows, "ctas", m, n, "bwd default", base, inputs)
        block = triton.next_power_of_2(n)
        for ctas in (2, 4, 8):
            for warps in (8, 16, 32):
                if not 8 <= block // (ctas * warps * 32) <= 32:
                    continue
                for per_sm in (1, 2):
                    one = dataclasses.replace(
                        base,
                        block=block,
                        one_tile=True,
                        tree=False,
                        dw_float64=False,
                        num_warps=warps,
                        stages=1,
                        rows=1,
                        ctas=ctas,
                    )
                    cfg = _grid(m, n, max(1, sm * per_sm // ctas), one)
                    name = f"bwd ctas={ctas} w={warps} per_sm={per_sm}"
                    _bwd_record(rows, "ctas", m, n, name, cfg, inputs)
        del inputs


SHAPES = [
    (128, 257, torch.float32),
    (4096, 4096, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (32768, 8192, torch.bfloat16),
    (65536, 1024, torch.bfloat16),
    (8192, 16384, torch.bfloat16),
    (16384, 4096, torch.float16),
    (16384, 4096, torch.float32),
    (4096, 65536, torch.bfloat16),
]


def peer_fns():
    out = {
        "ours": lambda x, w: rk.rmsnorm(x, w, EPS),
        "F.rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS),
    }
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        out["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    except Exception as e:  # noqa: BLE001
        print("liger not installed:", repr(e)[:200])
    return out


def part_peers(rows):
    for m, n, dtype in SHAPES:
        _peers_graph(rows, "peers", m, n, dtype)


def part_acc(rows):
    """float32 dweight max error vs the float64 oracle, ours and F.rms_norm's: the campaign's
    shapes (small: in-launch tree, float64 rows) and two large ones (sum launch, float32 rows),
    with the defaults and with float32 rows forced everywhere."""
    configs = {
        "default": {},
        "float32 rows, sum launch": dict(tree=False, dw_float64=False),
    }
    shapes = [(m, n) for m in (1, 17, 128) for n in (256, 257, 1000, 4096)]
    shapes += [(4096, 4096), (16384, 1024)]

    def ours(changes):
        def dweight(x, w, dy):
            m, n = x.shape
            cfg = dataclasses.replace(_sum_finish(backward_config(m, n, 0)), **changes)
            _, _, rstd = ops.launch_forward(x, w, None, EPS, 0.0, x.dtype)
            return ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=cfg)[1]

        return dweight

    def torch_dweight(x, w, dy):
        wl = w.detach().requires_grad_()
        return torch.autograd.grad(F.rms_norm(x, (x.shape[1],), wl, EPS), (wl,), dy)[0]

    for label, changes in configs.items():
        worst = 0.0
        for m, n in shapes:
            for inputs in ("unit", "random"):
                torch.manual_seed(m * 7919 + n)
                x = torch.randn(m, n, device="cuda")
                w = torch.ones(n, device="cuda")
                if inputs == "random":
                    w = 1 + 0.5 * torch.randn(n, device="cuda")
                dy = torch.randn(m, n, device="cuda")
                wd = w.double().requires_grad_()
                rk.rmsnorm_reference(x.double(), wd, EPS).backward(dy.double())
                errs = {}
                for name, f in (("ours", ours(changes)), ("torch", torch_dweight)):
                    errs[name] = (f(x, w, dy).double() - wd.grad).abs().max().item()
                ratio = errs["ours"] / errs["torch"] if errs["torch"] > 0 else math.inf
                worst = max(worst, ratio)
                rows.append(
                    dict(
                        part="acc",
                        config=label,
                        M=m,
                        N=n,
                        inputs=inputs,
                        ours=errs["ours"],
                        torch=errs["torch"],
                        ratio=ratio,
                    )
                )
        print(json.dumps(dict(part="acc", config=label, worst_ratio=worst)), flush=True)


#: Shapes of part onelaunch: part small's, where the heuristic takes the sum finish (two
#: launches) and a slow host pays for the second one in eager mode.
ONELAUNCH = SMALL + [(512, 4096, torch.bfloat16), (4096, 1024, torch.bfloat16)]


def host_us(fn, calls=2000) -> float:
    """Host cost of one eager call (us): the bench's host timer (``calls`` calls, the GPU
    synchronised only at the end)."""
    from rmsnorm_kernel.cli.bench.timers import CudaTimers

    return CudaTimers({}).host(lambda: fn, calls, 50)


def _native_fwd_bwd(x, w, dy):
    return torch.autograd.grad(F.rms_norm(x, (x.shape[-1],), w, EPS), (x, w), dy)


def _host_rounds(rows, part, m, n, calls, x, w, dy, per_round=2000):
    """Eager host cost per call of each of ``calls`` (name -> fn) and of F.rms_norm's fwd+bwd on
    the same tensors, 3 interleaved rounds of ``per_round`` calls; the median round recorded."""
    calls = dict(calls)
    calls["F.rms_norm fwd+bwd"] = functools.partial(
        _native_fwd_bwd, x.detach().requires_grad_(), w.detach().requires_grad_(), dy
    )
    times = {name: [] for name in calls}
    for _ in range(3):
        for name, fn in calls.items():
            times[name].append(host_us(fn, per_round))
    for name, ts in times.items():
        r = dict(part=part, M=m, N=n, variant=name, mode="host", rounds=ts)
        r["us"] = sorted(ts)[1]
        rows.append(r)
        print(json.dumps(r), flush=True)


def part_onelaunch(rows):
    """Small M, backward alone: the heuristic's sum finish (a second launch) against the in-launch
    tree at the same grid, one level (fanout = groups) or 16 children per node, in graph mode
    (GPU time) and as eager host cost per call (interleaved rounds), beside F.rms_norm's eager
    fwd+bwd host cost as the yardstick."""
    for m, n, dtype in ONELAUNCH:
        inputs = _bwd_inputs(m, n, dtype)
        x, w, dy, rstd, _ = inputs
        base = _sum_finish(backward_config(m, n, 0, itemsize=dtype.itemsize))
        variants = {"default": base}
        if not base.tree:
            if base.groups <= 128:
                variants["tree one level"] = dataclasses.replace(
                    base, tree=True, fanout=max(2, base.groups), dw_float64=True
                )
            variants["tree fanout=16"] = dataclasses.replace(
                base, tree=True, fanout=16, dw_float64=True
            )
        for name, cfg in variants.items():
            _bwd_record(rows, "onelaunch", m, n, name, cfg, inputs)
        calls = {
            name: functools.partial(
                ops.launch_backward, dy, x, w, rstd, 0.0, None, x.dtype, config=cfg
            )
            for name, cfg in variants.items()
        }
        _host_rounds(rows, "onelaunch", m, n, calls, x, w, dy)
        del inputs, x, w, dy, rstd, calls


#: Shapes of part columns: small M, where the heuristic's backward takes two launches (the sum
#: finish) and 128 x 257 / 256 x 4096 fwd+bwd trail compile (bench 2026-12-02c: 0.81x / 0.95x).
COLUMNS = SMALL


def part_columns(rows):
    """Small M, backward alone: the heuristic's config against the column-strip finish
    (``BackwardConfig.dw_columns``: one launch, no partials) on the heuristic's row programs,
    strips of 16-64 columns by tiles of 2048 or 4096 values, in graph mode (dx checked bit for
    bit against the heuristic's); then the eager host cost per call of the heuristic and of the
    strip config of 32 columns, interleaved, beside F.rms_norm's fwd+bwd."""
    for m, n, dtype in COLUMNS:
        inputs = _bwd_inputs(m, n, dtype)
        x, w, dy, rstd, _ = inputs
        base = _sum_finish(backward_config(m, n, 0, itemsize=dtype.itemsize))
        dx0 = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=base)[0]
        plain = dataclasses.replace(base, tree=False, dw_float64=base.dw_float64 or base.tree)
        variants = {"heuristic": base}
        for cols in (16, 32, 64):
            for tile in (2048, 4096):
                dw_rows = config.columns_rows(m, cols, tile)
                cfg = dataclasses.replace(plain, dw_columns=cols, dw_rows=dw_rows)
                variants[f"columns {cols} x {dw_rows} rows"] = cfg
        for name, cfg in variants.items():
            _bwd_record(rows, "columns", m, n, f"{name} {dtype}", cfg, inputs, dx0)
        _bwd_record(rows, "columns", m, n, f"heuristic again {dtype}", base, inputs, dx0)
        strip = variants[f"columns 32 x {config.columns_rows(m, 32, 4096)} rows"]
        calls = {
            name: functools.partial(
                ops.launch_backward, dy, x, w, rstd, 0.0, None, x.dtype, config=cfg
            )
            for name, cfg in (("heuristic", base), ("columns 32", strip))
        }
        _host_rounds(rows, "columns", m, n, calls, x, w, dy, 1000)
        del inputs, x, w, dy, rstd, calls


#: Shapes of part colrule: around COLUMNS_MAX_ELEMS (2^20 elements) and SMALL_M, the dtypes and
#: widths part columns left out.
COLRULE = [
    (512, 2048, torch.bfloat16),
    (512, 4096, torch.bfloat16),
    (256, 4096, torch.float16),
    (256, 4096, torch.float32),
    (2048, 512, torch.bfloat16),
    (1024, 2048, torch.bfloat16),
    (2048, 1024, torch.bfloat16),
    (64, 4096, torch.bfloat16),
    (2048, 256, torch.float32),
]


def part_colrule(rows):
    """Backward alone, graph mode, around the column-strip rule: the heuristic's choice, the sum
    finish and the strips (COLUMNS_STRIP x COLUMNS_TILE), dx checked against the sum finish's."""
    for m, n, dtype in COLRULE:
        inputs = _bwd_inputs(m, n, dtype)
        x, w, dy, rstd, _ = inputs
        chosen = backward_config(m, n, 0, itemsize=dtype.itemsize)
        base = _sum_finish(chosen)
        dx0 = ops.launch_backward(dy, x, w, rstd, 0.0, None, x.dtype, config=base)[0]
        strips = dataclasses.replace(
            base,
            tree=False,
            dw_float64=base.dw_float64 or base.tree,
            dw_columns=config.COLUMNS_STRIP,
            dw_rows=config.columns_rows(m),
        )
        for name, cfg in (("heuristic", chosen), ("sum finish", base), ("strips", strips)):
            _bwd_record(rows, "colrule", m, n, f"{name} {dtype}", cfg, inputs, dx0)
        del inputs, x, w, dy, rstd


#: Part fwd32k: the packed pass at 32768 bf16 columns (the heuristic: 16 warps, masked) against
#: 32 warps with and without masks, where compile leads (fwdpkg, fifteenth session).
FWD32K = [
    (4096, 32768, torch.bfloat16, False),
    (2048, 32768, torch.bfloat16, False),
    (1024, 32768, torch.bfloat16, False),
]


def part_fwd32k(rows):
    part_fwdpkg(rows, FWD32K)


#: Shapes of part evict: (M, N, dtype). The bench's forward shapes and the heuristic's other
#: paths (several rows, packed, chunked), where hintslast's evict_last on the row (at 8192 bf16
#: and 4096 float32 columns) is not measured yet.
EVICT = [
    (128, 257, torch.float32),
    (256, 4096, torch.bfloat16),
    (1024, 4096, torch.bfloat16),
    (4096, 4096, torch.bfloat16),
    (8192, 4096, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (16384, 4096, torch.float16),
    (16384, 4096, torch.float32),
    (16384, 2048, torch.bfloat16),
    (65536, 1024, torch.bfloat16),
    (262144, 256, torch.bfloat16),
    (1024, 8192, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (32768, 8192, torch.bfloat16),
    (8192, 16384, torch.bfloat16),
    (4096, 32768, torch.bfloat16),
    (4096, 65536, torch.bfloat16),
    (4096, 65536, torch.float32),
    (256, 262144, torch.bfloat16),
]


def part_evict(rows):
    """Forward in graph mode at EVICT: the heuristic's config beside the same with ``evict_last``
    switched (a cache hint: checked bit for bit), and at twice the warps with the hint for one
    pass rows of 4096+ columns (another reduction order: within 8 units in the last place),
    interleaved rounds."""
    for m, n, dtype in EVICT:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        half = x.element_size() == 2
        cfg = config.forward_config(m, n, 0, False, dtype if half else None)
        print(json.dumps(dict(part="evict", M=m, N=n, default=repr(cfg))), flush=True)
        run = functools.partial(_fwd_with, x, w, None, dtype)
        flip = f"evict_last={not cfg.evict_last}"
        variants = {"default": run(cfg)}
        variants[flip] = run(dataclasses.replace(cfg, evict_last=not cfg.evict_last))
        tols = {flip: 0.0}
        atol = 8 * torch.finfo(dtype).eps * variants["default"]()[0].abs().max().item()
        if cfg.rows == 0 and cfg.block >= n >= 4096 and cfg.num_warps < 32 and not cfg.packed:
            more = dataclasses.replace(cfg, num_warps=cfg.num_warps * 2, evict_last=True)
            variants[f"evict_last w={more.num_warps}"] = run(more)
        _earlyw_rounds(rows, m, n, str(dtype), x, variants, "evict", atol, tols=tols)
        x = w = None


#: Shapes of part fwdwarps (env FWD_WARPS: "MxN,MxN", bf16): the one-pass widths where the H100
#: benches of the 44th-48th sessions put ours 3% behind Liger and quack (8192 x 8192 91.8 us
#: against 88.5; 4096 x 16384 91.5 against 88.7; 8192 x 16384 180.6 against 179.9), and a shape
#: of each width beside them.
FWD_WARPS = [(8192, 8192), (4096, 16384), (8192, 16384), (32768, 8192), (2048, 16384)]
if os.environ.get("FWD_WARPS"):
    FWD_WARPS = [tuple(map(int, s.split("x"))) for s in os.environ["FWD_WARPS"].split(",")]


def part_fwdwarps(rows):
    """Forward in graph mode at FWD_WARPS (bf16): the heuristic's one pass beside the same at
    4-32 warps with and without ``evict_last`` (and with masks flipped, rows exactly a block
    wide), the packed one pass (the row kept 16-bit) at
    8-32 warps, and Liger and compile, in interleaved rounds. Other warps reduce in another
    order (within 8 units in the last place of the largest value); the hint alone is checked
    bit for bit."""
    dtype = torch.bfloat16
    for m, n in FWD_WARPS:
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        cfg = config.forward_config(m, n, 0, False, dtype, n * 2)
        print(json.dumps(dict(part="fwdwarps", M=m, N=n, default=repr(cfg))), flush=True)
        run = functools.partial(_fwd_with, x, w, None, dtype)
        variants = {"default": run(cfg)}
        tols = {}
        atol = 8 * torch.finfo(dtype).eps * variants["default"]()[0].abs().max().item()
        base = dataclasses.replace(cfg, packed=False)
        for warps in (4, 8, 16, 32):
            for last in (False, True):
                v = dataclasses.replace(base, num_warps=warps, evict_last=last)
                if v == cfg:
                    continue
                name = f"w={warps}{' last' if last else ''}"
                variants[name] = run(v)
                tols[name] = 0.0 if warps == cfg.num_warps and not cfg.packed else atol
        if n == cfg.block:
            for warps in (8, 16, 32):
                v = dataclasses.replace(
                    base, num_warps=warps, evict_last=True, unmasked=not cfg.unmasked
                )
                name = f"w={warps} last unmasked={v.unmasked}"
                variants[name] = run(v)
                tols[name] = 0.0 if warps == cfg.num_warps and not cfg.packed else atol
                v = dataclasses.replace(base, num_warps=warps, packed=True, evict_last=True)
                if v != cfg:
                    variants[f"packed w={warps} last"] = run(v)
                    tols[f"packed w={warps} last"] = atol
        variants.update(_peer_variants(x, w))
        _earlyw_rounds(
            rows, m, n, str(dtype), x, variants, "fwdwarps", atol, FORWARD_PEERS, tols=tols
        )
        x = w = None


#: Shapes of part fwdhint (M, N, dtype; env FWD_HINT: "MxN,MxN", bf16): where the heuristic
#: loads x ``evict_last`` (EVICT_LAST_ROW_BYTES), from 16 MiB to 512 MiB of x.
FWD_HINT = [
    (1024, 8192, torch.bfloat16),
    (4096, 8192, torch.bfloat16),
    (8192, 8192, torch.bfloat16),
    (32768, 8192, torch.bfloat16),
    (1024, 16384, torch.bfloat16),
    (4096, 16384, torch.bfloat16),
    (8192, 16384, torch.bfloat16),
    (16384, 4096, torch.float32),
    (4096, 65536, torch.bfloat16),
]
if os.environ.get("FWD_HINT"):
    FWD_HINT = [
        (*map(int, s.split("x")), torch.bfloat16) for s in os.environ["FWD_HINT"].split(",")
    ]
#: More warps part fwdhint times without the hint (env FWD_HINT_WARPS: "16,32"), beside twice
#: the heuristic's: part fwdwarps, replaying one x, had 32 warps unhinted 8% ahead at 1024 x
#: 16384 bf16 on the H200 (fifty-third session); with x rotated on the H100 too (fifty-fourth:
#: config.FEW_ROWS_FORWARD), where these warps are also timed with the hint.
FWD_HINT_WARPS = [int(s) for s in os.environ.get("FWD_HINT_WARPS", "").split(",") if s]
#: Part fwdhint's rotated inputs: at least this many bytes of distinct x (4x an H100's or
#: H200's 50 MiB L2), so no replayed call finds its x in L2 from the call before.
FWD_HINT_ROTATE_BYTES = 256 << 20


def _cycling(run, xs):
    """A no-argument call that runs ``run(x)`` on the next of ``xs`` each time: captured in a
    graph, consecutive calls read different x, as consecutive layers of a model do."""
    at = [0]

    def call():
        x = xs[at[0] % len(xs)]
        at[0] += 1
        return run(x)

    return call


def part_fwdhint(rows):
    """Forward in graph mode at FWD_HINT: the heuristic's config with and without
    ``evict_last`` on x (a hint: checked bit for bit), one-pass rows at other warps (twice the
    heuristic's where it hints, FWD_HINT_WARPS; another reduction order: not checked), and
    Liger, each on the same x
    every call (the bench's graph mode, where a replayed call may find its x in L2 from the call
    before) and on x rotated over FWD_HINT_ROTATE_BYTES of distinct tensors, interleaved
    rounds."""
    for m, n, dtype in FWD_HINT:
        torch.manual_seed(0)
        nbytes = m * n * torch.finfo(dtype).bits // 8
        k = max(2, -(-FWD_HINT_ROTATE_BYTES // nbytes))
        xs = [torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(k)]
        w = torch.randn(n, device="cuda", dtype=dtype)
        half = dtype != torch.float32
        cfg = config.forward_config(m, n, 0, False, dtype if half else None, n * (2 if half else 4))
        flip = dataclasses.replace(cfg, evict_last=not cfg.evict_last)
        print(json.dumps(dict(part="fwdhint", M=m, N=n, default=repr(cfg), rotate=k)), flush=True)

        def ours(c, w=w, dtype=dtype):
            return lambda x: ops.launch_forward(x, w, None, EPS, 0.0, dtype, config=c)

        runs = {"default": ours(cfg), f"evict_last={flip.evict_last}": ours(flip)}
        if cfg.rows == 0 and cfg.block >= n:
            # one pass: without the hint at twice the heuristic's warps (the H100's best at
            # 8192-16384 columns, part fwdwarps) and at any warps asked for (FWD_HINT_WARPS);
            # where the heuristic itself is unhinted (config.FEW_ROWS_FORWARD), those warps
            # with the hint too (the rule it replaced: 8 warps hinted)
            more = {*FWD_HINT_WARPS, *([2 * cfg.num_warps] if cfg.evict_last else [])}
            for warps in sorted({w for w in more if w <= 32} - {cfg.num_warps}):
                for hint in (False, True) if not cfg.evict_last else (False,):
                    other = dataclasses.replace(cfg, evict_last=hint, num_warps=warps)
                    runs[f"evict_last={hint} w={warps}"] = ours(other)
        from rmsnorm_kernel.cli.bench import peers

        liger = peers.build(["liger"], EPS).get("liger")
        if callable(liger):
            runs["liger"] = lambda x, f=liger, w=w: (f(x, w),)
        variants = {}
        for name, run in runs.items():
            variants[f"{name} same"] = _cycling(run, xs[:1])
            variants[f"{name} rotated x{k}"] = _cycling(run, xs)
        y_ref = runs["default"](xs[0])[0]
        assert torch.equal(runs[f"evict_last={flip.evict_last}"](xs[0])[0], y_ref)
        variants["default"] = variants.pop("default same")  # _earlyw_rounds' reference
        _earlyw_rounds(rows, m, n, str(dtype), xs[0], variants, "fwdhint", 0.0, tuple(variants))
        xs = w = None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="peers,bwd,acc,fwd")
    args = p.parse_args()
    rows = []
    meta = dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__
    )
    for part in args.parts.split(","):
        try:
            globals()[f"part_{part}"](rows)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        with open(args.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()

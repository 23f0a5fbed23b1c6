"""Compile every kernel specialisation the launchers can request, for sm_90, without a GPU.

Triton's interpreter accepts code the compiler refuses (e.g. a variable whose type changes inside
a runtime ``if``), so CPU tests alone cannot prove the kernels compile. This drives Triton's own
binder and ``triton.compile`` for target ``cuda:90`` (the H200) on CPU tensors, through PTX and
ptxas to a cubin, and reports registers and spills per variant. Run it with the Triton version the
GPU has (3.6 on the H200 image), e.g.

    TRITON_INTERPRET=0 PYTHONPATH=<triton 3.6>:src python experiments/kernel_perf/compile_check.py

``--staged``: instead, a JSON report of what the staged split-row forward relies on in its build
(:func:`staged_split_report`; ``tests/kernel/test_split_staged_build.py`` checks it).
``--store-rstd``: instead, the heuristic's one-row forward configs with and without the rstd store
(registers, spills, CTAs per SM) and the variant inference takes (``config.stores_rstd``); exits 1
if inference loses CTAs per SM anywhere.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import time

os.environ["TRITON_INTERPRET"] = "0"  # compile, do not interpret (must precede the import)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler.compiler import make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

from rmsnorm_kernel import config, kernels  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
BACKEND = make_backend(TARGET)
config.sm_count = lambda index: 132  # the H200's SMs: grids as the GPU would size them
config.hopper = lambda index: True  # an H200: clusters where this Triton splits them (>= 3.8)
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def resources(kernel) -> str:
    """Registers, stack (spills) and shared memory of the cubin (cuobjdump -res-usage)."""
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([CUOBJDUMP, "-res-usage", f.name], capture_output=True, text=True)
    line = [ln for ln in out.stdout.splitlines() if "REG:" in ln]
    return line[0].strip() if line else out.stdout[-200:]


def compile_one(fn, args, num_warps, num_stages=1, num_ctas=1, maxnreg=0):
    binder = create_function_from_signature(fn.signature, fn.params, BACKEND)
    kwargs = dict(num_warps=num_warps, num_stages=num_stages, num_ctas=num_ctas)
    if maxnreg:  # ptxas' register cap (ForwardConfig.maxnreg), as launch.CachedKernel passes it
        kwargs["maxnreg"] = maxnreg
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(
        BACKEND, kwargs, bound, specialization, options
    )
    src = triton.compiler.ASTSource(fn, signature, constexprs, attrs)
    return triton.compile(src, target=TARGET, options=options.__dict__)


def t(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype)


DT = {torch.float32: tl.float32, torch.float64: tl.float64}
#: The folded dy sum's rounding dtype (DY_SUM): dy's own.
#: The forward kernels' last constexprs: X_EVICT (no hint), STORE_RSTD (training's variant).
TAIL = ("", True)
STORED = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, **DT}


def variants():
    for dtype, w_dtype in [
        (torch.bfloat16, torch.bfloat16),
        (torch.float32, torch.float32),
        (torch.float16, torch.float32),
        (torch.float64, torch.float64),
        (torch.float32, torch.bfloat16),
    ]:
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        for n in (257, 1024, 4096, 16384, 32768, 65536, 65537):
            m = 64
            x, w = t(m, n, dtype=dtype), t(n, dtype=w_dtype)
            rstd = t(m, dtype=acc)
            fwd = config.forward_config(m, n, 0, acc == torch.float64, dtype)
            for has_w, has_r, llama, sw in itertools.product(
                (True, False), (True, False), (False, True), (1, 3)
            ):
                if sw != 1 and not has_w:
                    continue
                consts = (has_w, has_r, llama, DT[acc], fwd.block)
                floats = (1e-6, 0.0, 0.0, 0.0)
                name = f"{dtype} w={has_w} r={has_r} llama={llama} stride_w={sw} N={n}"
                if fwd.rows:
                    args = (x, x, w, x, x, rstd, n, n, sw, m, n, *floats, *consts, fwd.rows, *TAIL)
                    kernel = kernels.rmsnorm_forward_rows_kernel
                    yield f"fwd_rows {name}", kernel, args, fwd.num_warps
                else:
                    flags = (fwd.block >= n, fwd.packed and not has_r, fwd.unmasked, False, *TAIL)
                    args = (x, x, w, x, x, rstd, n, n, sw, n, *floats, *consts, *flags)
                    yield f"fwd {name}", kernels.rmsnorm_forward_kernel, args, fwd.num_warps
            yield from _backward_variants(dtype, w_dtype, acc, n, m, x, w, rstd)
            # Large M: the pipelined config (BWD_PIPELINE) at 4096 columns, and the several-rows
            # backward (BWD_ROWS) at 257 (a 512 block) and 1024 columns.
            big = {4096: 16384, 257: 262144, 1024: 32768}.get(n)
            if big:
                xb, rb = t(big, n, dtype=dtype), t(big, dtype=acc)
                yield from _backward_variants(dtype, w_dtype, acc, n, big, xb, w, rb)


#: Cluster configs of tests/kernel/test_clusters.py and tune.py part ctas: (N, warps, CTAs).
CLUSTER_FWD = [(32768, 16, 2), (65536, 16, 4), (65536, 32, 2), (131072, 32, 8), (262144, 32, 8)]
CLUSTER_BWD = [(16384, 8, 2), (32768, 16, 2), (65536, 16, 4), (65536, 32, 2)]


def cluster_variants():
    """One-pass forward and one-tile backward (sum finish, float32 rows) over thread-block
    clusters, bf16 with a weight, beside the same without clusters."""
    m = 64
    floats = (1e-6, 0.0, 0.0, 0.0)
    for n, warps, ctas in CLUSTER_FWD:
        x, w, rstd = t(m, n, dtype=torch.bfloat16), t(n, dtype=torch.bfloat16), t(m)
        consts = (True, False, False, tl.float32, n, True, False, False, False, *TAIL)
        args = (x, x, w, x, x, rstd, n, n, 1, n, *floats, *consts)
        for c in (1, ctas):
            yield (
                f"cluster fwd N={n} w={warps} ctas={c}",
                kernels.rmsnorm_forward_kernel,
                args,
                warps,
                1,
                c,
            )
    for n, warps, ctas in CLUSTER_BWD:
        x, w, rstd = t(m, n, dtype=torch.bfloat16), t(n, dtype=torch.bfloat16), t(m)
        part, cnt, dwt = t(8, n), t(8, dtype=torch.int32), t(n, dtype=torch.bfloat16)
        args = (x, x, w, rstd, rstd, x, x, x, x, x, dwt, part, cnt, n, n, n, 1, 0, 0, m, n, 8)
        args += (0.0, 0.0)
        consts = (True, False, 1, tl.bfloat16, False, False, tl.float32, tl.float32, n, True, 1)
        consts += (False, 8)
        for c in (1, ctas):
            name = f"cluster bwd N={n} w={warps} ctas={c}"
            yield name, kernels.rmsnorm_backward_kernel, args + consts, warps, 1, c


def launch_cluster_variants():
    """The cluster backward (``BackwardConfig.cluster``, ``config.BWD_CLUSTER_LAUNCH``'s plans):
    each plan (16-bit ones for bf16 and fp16) as :func:`_launch_cluster_cases`; compiled for one
    CTA (the launch makes the clusters)."""
    m = 4096
    for (row_block, size), (block, warps, _, prefetch) in config.BWD_CLUSTER_LAUNCH.items():
        for dtype in [torch.float32] if size == 4 else [torch.bfloat16, torch.float16]:
            yield from _launch_cluster_cases(m, row_block, size, dtype, block, warps, prefetch)


def launch_cluster_forward_variants():
    """The cluster forward (``ForwardConfig.cluster``, ``config.CLUSTER_FORWARD``'s plans), as
    ``ops.launch_forward`` builds each: at the widest row the plan covers in MAX_CLUSTER CTAs,
    with a weight, under the plan's register cap (fp16 then widened from its bits, else by
    ``_widen_exact``); compiled for one CTA (the launch makes the clusters)."""
    m = 512
    floats = (1e-6, 0.0, 0.0, 0.0)
    for (dtype, has_r), plans in config.CLUSTER_FORWARD.items():
        for block, warps, maxnreg in plans:
            c = config.MAX_CLUSTER
            n = c * block
            c_pow2 = 1 << (c - 1).bit_length()
            x, w, rstd = t(m, n, dtype=dtype), t(n, dtype=dtype), t(m)
            args = (x, x, w, x, x, rstd, t(m * c_pow2), n, n if has_r else 0, 1, n, *floats)
            consts = (True, has_r, False, tl.float32, block, c, c_pow2, False, True, True)
            consts += (not maxnreg,)
            name = f"cluster fwd {dtype} res={has_r} N={n} C={c} w={warps} maxnreg={maxnreg}"
            yield name, kernels.rmsnorm_forward_cluster_kernel, args + consts, warps, 1, 1, maxnreg


def _launch_cluster_cases(m, n, size, dtype, block, warps, prefetch):
    """One BWD_CLUSTER_LAUNCH plan's builds for ``dtype``: with a weight, and for 16-bit rows
    without one, with dh and with Llama's rounding."""
    c = -(-n // block)
    x, w, rstd = t(m, n, dtype=dtype), t(n, dtype=dtype), t(m)
    part, scratch = t(64, n), t(m * c)
    cases = [(True, False, False)]
    if size == 2:
        cases += [(False, True, False), (True, False, True)]
    for has_w, has_dh, llama in cases:
        args = (x, x, w, rstd, x, x, x, x, x, part, scratch, n, n, n, 1, n, n, m, n, 64)
        args += (0.0, 0.0)
        consts = (has_w, has_dh, 1, STORED[dtype], False, llama, tl.float32, tl.float32)
        consts += (block, c, 1 << (c - 1).bit_length(), True, prefetch)
        name = f"cluster bwd {dtype} N={n} C={c} w={warps} weight={has_w} dh={has_dh}"
        name += f" llama={llama} prefetch={prefetch}"
        yield name, kernels.rmsnorm_backward_cluster_kernel, args + consts, warps


def columns_variants():
    """The column-strip backward (BackwardConfig.dw_columns) at small M: bf16 and float32 rows,
    with and without a weight, dh, three-part dy, Llama's rounding."""
    m = 256
    for dtype, n, block, col_block, col_rows in [
        (torch.bfloat16, 4096, 4096, 16, 256),
        (torch.bfloat16, 1024, 1024, 32, 128),
        (torch.float32, 257, 512, 32, 128),
    ]:
        x, w, rstd = t(m, n, dtype=dtype), t(n, dtype=dtype), t(m)
        for has_w, has_dh, parts, llama, dw64 in itertools.product(
            (True, False), (True, False), (1, 3), (False, True), (True, False)
        ):
            dw_acc = tl.float64 if dw64 else tl.float32
            args = (x, x, w, rstd, x, x, x, x, x, w, n, n, n, 1, n, n, m, n, 4, 64, 0.0, 0.0)
            consts = (has_w, has_dh, parts, STORED[dtype], False, llama, tl.float32, dw_acc)
            consts += (block, 3 if block >= 1024 else 1, col_block, col_rows)
            name = (
                f"bwd_columns {dtype} N={n} w={has_w} dh={has_dh} dy_parts={parts} "
                f"llama={llama} dw64={dw64}"
            )
            warps = config._bwd_warps(block)
            yield name, kernels.rmsnorm_backward_columns_kernel, args + consts, warps, consts[-3]


def _backward_variants(dtype, w_dtype, acc, n, m, x, w, rstd):
    """The backward launches of the heuristic's config for (m, n), every flag combination."""
    bwd = config.backward_config(m, n, 0, acc == torch.float64, itemsize=dtype.itemsize)
    tiles, groups = bwd.tiles_for(n), bwd.groups
    if not bwd.one_tile:
        for parts in (1, 3):
            args = (x, x, w, rstd, x, x, n, n, 1, n, n, n, 0.0, 0.0, True, parts, STORED[dtype])
            yield (
                f"row_dot {dtype} N={n} dy_parts={parts}",
                kernels.rmsnorm_row_dot_kernel,
                args + (DT[acc], config.ROW_DOT_BLOCK),
                config.ROW_DOT_WARPS,
            )
    part64 = t(groups, n, dtype=torch.float64)
    sum_args = (part64, t(n, dtype=w_dtype), groups, n)
    sum_args += (config.SUM_BLOCK_G, config.SUM_BLOCK_N)
    yield f"dw_sum {w_dtype} N={n}", kernels.dweight_sum_kernel, sum_args, 4
    for has_w, has_dh, dw64, tree, llama, parts in itertools.product(
        (True, False), (True, False), (True, False), (True, False), (False, True), (1, 3)
    ):
        if parts == 3 and (dw64 or tree):  # the dy sum is independent of the dweight finish
            continue
        dw_acc = torch.float64 if dw64 or acc == torch.float64 else torch.float32
        part = t(groups, n, dtype=torch.float64)
        cnt = t(tiles * groups, dtype=torch.int32)
        dwt = t(n, dtype=w_dtype)
        rpp = bwd.rows_per_program
        name = (
            f"{dtype}/{w_dtype} w={has_w} dh={has_dh} dw64={dw64} tree={tree} "
            f"llama={llama} dy_parts={parts} N={n} M={m} stages={bwd.stages}"
        )
        # the pass's three-part dy and, beside float32 rows, dx's bfloat16 copy
        has_dx2 = parts == 3 and dtype == torch.float32
        dx2 = t(m, n, dtype=torch.bfloat16) if has_dx2 else x
        name += f" dx2={has_dx2}"
        sums = (has_w, has_dh, parts, STORED[dtype], has_dx2, llama)
        if bwd.rows > 1:  # the several-rows kernel: no MEAN_UX, no column tiles
            args = (x, x, w, rstd, x, x, x, x, dx2, dwt, part, cnt, n, n, n, 3, n, n, m, n, rpp)
            args += (0.0, 0.0)
            consts = (*sums, DT[acc], DT[dw_acc], bwd.block, bwd.rows)
            consts += (bwd.stages, tree, bwd.fanout)
            yield (
                f"bwd_rows {name} rows={bwd.rows}",
                kernels.rmsnorm_backward_rows_kernel,
                args + consts,
                bwd.num_warps,
                bwd.stages,
            )
            continue
        args = (x, x, w, rstd, rstd, x, x, x, x, dx2, dwt, part, cnt, n, n, n, 3, n, n, m, n)
        args += (rpp,)
        args += (0.0, 0.0)
        consts = (*sums, DT[acc], DT[dw_acc], bwd.block, bwd.one_tile)
        consts += (bwd.stages, tree, bwd.fanout)
        yield f"bwd {name}", kernels.rmsnorm_backward_kernel, args + consts, bwd.num_warps


def ctas_per_sm(registers: int, warps: int) -> int:
    """CTAs per SM the registers allow on sm_90: 64K registers, allocated per warp in units of
    256 (8 per thread), at most 2048 threads per SM (shared memory not counted)."""
    per_warp = -(-registers * 32 // 256) * 256
    return min(65536 // (per_warp * warps), 2048 // (32 * warps))


def store_rstd_report() -> int:
    """Registers and CTAs per SM of the heuristic's one-row forward configs (4096 rows, with a
    weight) with and without the rstd store (STORE_RSTD), and the variant a keep_rstd=False launch
    takes (config.stores_rstd). Returns how many configs lose CTAs per SM there."""
    losses = 0
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for n in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072):
            m = 4096
            x, w, rstd = t(m, n, dtype=dtype), t(n, dtype=dtype), t(m)
            for has_r in (False, True):
                fwd = config.forward_config(
                    m, n, 0, False, None if has_r else dtype, 0 if has_r else n * dtype.itemsize
                )
                if fwd.rows or fwd.ctas > 1:
                    continue
                seen = {}
                for store in (True, False):
                    flags = (fwd.block >= n, fwd.packed, fwd.unmasked, False)
                    consts = (True, has_r, False, tl.float32, fwd.block, *flags)
                    consts += ("evict_last" if fwd.evict_last else "", store)
                    args = (x, x, w, x, x, rstd, n, n, 1, n, 1e-6, 0.0, 0.0, 0.0, *consts)
                    k = compile_one(kernels.rmsnorm_forward_kernel, args, fwd.num_warps)
                    usage = resources(k)
                    regs = int(re.search(r"REG:(\d+)", usage).group(1))
                    stack = re.search(r"STACK:(\d+)", usage).group(1)
                    seen[store] = (regs, stack, ctas_per_sm(regs, fwd.num_warps))
                taken = seen[config.stores_rstd(fwd, False)]
                lost = taken[2] < seen[True][2]
                losses += lost
                print(
                    f"{'LOSS' if lost else 'ok  '} {dtype} N={n} residual={has_r} {fwd}: "
                    + ", ".join(
                        f"store={s} {r} regs {st} B stack {c} CTAs/SM"
                        for s, (r, st, c) in seen.items()
                    )
                    + f"; inference takes store={config.stores_rstd(fwd, False)}",
                    flush=True,
                )
    return losses


#: (x dtype, block, warps, stages) of the staged split kernel's report: the 16-bit and float32
#: shapes split_tune.py's STAGED times, and float64 math.
STAGED_REPORT = [
    (torch.bfloat16, 16384, 8, 3),
    (torch.float16, 8192, 8, 5),
    (torch.float32, 8192, 16, 2),
    (torch.float64, 4096, 8, 3),
]


def staged_split_report() -> list[dict]:
    """What the staged split kernel (``kernels.rmsnorm_forward_split_staged_kernel``) relies on,
    read from its sm_90 build, per STAGED_REPORT config, with and without a residual:
    ``async_copies`` (Triton's pipeliner took the loop: its loads became cp.async into shared
    memory; a barrier or a nested loop in the loop would stop it), ``shared`` bytes (at most
    ``(stages - 1) * block`` bytes of each pipelined input, plus scratch), ``same_thread`` (the
    partial's store and the release atomic carry the same predicate: one thread makes both, so
    the release orders the store without a barrier), ``order`` (the asm spin precedes the
    partials' asm load, which precedes y's stores), registers and stack."""
    out = []
    for dtype, block, warps, stages in STAGED_REPORT:
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        c = 131072 // block
        c_pow2 = 1 << (c - 1).bit_length()
        for has_r in (False, True):
            x = t(512, 131072, dtype=dtype)
            args = (x, x, t(131072, dtype=dtype), x, x, t(512, dtype=acc))
            args += (t(512 * c_pow2, dtype=acc), t(512, dtype=torch.int64))
            args += (131072, 131072 if has_r else 0, 1, 512, 131072, 1e-6, 0.0, 0.0, 0.0)
            consts = (True, has_r, False, DT[acc], block, c, c_pow2, False, True, stages, True)
            k = compile_one(kernels.rmsnorm_forward_split_staged_kernel, args + consts, warps)
            ptx = k.asm["ptx"]
            atom = re.search(r"@(%p\d+) atom\.global\.gpu\.release\.add\.u64", ptx)
            # the partial's store: the last scalar global store before the release
            stores = re.findall(
                r"@(%p\d+) st\.global\.b(?:32|64) ", ptx[: atom.start()] if atom else ""
            )
            spin = ptx.find("ld.acquire.gpu.global.b64")
            part = ptx.find("ld.relaxed.gpu.global.b")
            y = ptx.find("st.global.v", part)
            usage = resources(k)
            out.append(
                {
                    "config": f"{dtype} block={block} warps={warps} stages={stages} "
                    f"residual={has_r}",
                    "async_copies": k.asm["ttgir"].count("async_copy_global_to_local"),
                    "shared": k.metadata.shared,
                    "ring_bytes": (stages - 1) * block * dtype.itemsize * (2 if has_r else 1),
                    "same_thread": bool(stores) and stores[-1] == atom.group(1),
                    "order": 0 <= spin < part < y,
                    "registers": int(re.search(r"REG:(\d+)", usage).group(1)),
                    "stack": int(re.search(r"STACK:(\d+)", usage).group(1)),
                }
            )
    return out


def main():
    if "--store-rstd" in sys.argv:
        sys.exit(1 if store_rstd_report() else 0)
    if "--staged" in sys.argv:
        import json

        print(json.dumps(staged_split_report()))
        return
    failures = 0
    t0 = time.time()
    only = re.compile(os.environ.get("FILTER", ""))  # e.g. FILTER='^bwd .*N=4096'
    every = itertools.chain(
        variants(),
        cluster_variants(),
        launch_cluster_variants(),
        launch_cluster_forward_variants(),
        columns_variants(),
    )
    for name, fn, args, warps, *extra in every:
        if not only.search(name):
            continue
        try:
            k = compile_one(fn, args, warps, *extra)
            print(f"ok   {name}  {resources(k)}", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failing variant
            failures += 1
            print(f"FAIL {name}: {str(e)[-600:]}", flush=True)
    print(f"{failures} failures, {time.time() - t0:.0f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

"""A forward for rows wider than one SM's registers (N >= 65536 bf16) that reads x from HBM once:
each row split over C programs of one *cooperative* launch. Mode 3 became the package's
split-row forward (``kernels.rmsnorm_forward_split_kernel``, ``ForwardConfig.split``, 37th
session), with never-reset counters in place of this file's fresh zeros; this file stays as the
record of the schedules, and is still 7-11% faster than the package's kernel
(``split_tune.py --coop``), for reasons not yet found.
Mode 0 is ``wide_forward.split_row_coop_kernel``'s schedule (sixth session of 2026-11-30, measured
at 65536 columns only); modes 1-3 overlap the loads with the wait (README, 36th session).

Why cooperative: the C programs of a row exchange their partial sums of squares through global
memory and wait for each other. Programs that wait on others deadlock unless all are resident at
once; ``launch_cooperative_grid=True`` (cuLaunchCooperativeKernel) refuses a grid that cannot be
resident instead of hanging. The grid is persistent (G programs, G a multiple of C) and walks the
M * C tasks in lockstep: task t = pid + k * G is (row t // C, chunk t % C), so the C chunks of a
row are always in the same step k, and a program only ever waits on programs of its own step.

Deterministic: each program sums the C partials of its row in chunk order (no float atomics; the
only atomics are the int32 arrival counters). Not runnable through the interpreter for C > 1 (it
runs programs one after another, so the first waits for ever); C = 1 is the one-row case.

    PYTHONPATH=src python3 experiments/kernel_perf/coop_forward.py [--json OUT]

On a GPU: checks y and rstd against float64 for every config, then times each config against the
package (``rk.rmsnorm``) and F.rms_norm in the same process (do_bench, L2 flushed).
"""

from __future__ import annotations

import argparse
import functools
import json

import torch
import triton
import triton.language as tl

import rmsnorm_kernel as rk


@triton.jit
def _task_row(t, tasks, C: tl.constexpr):
    """The row of task ``t`` (clamped: a task past the end reads the last row, masked off)."""
    return tl.cast(tl.minimum(t, tasks - 1) // C, tl.int64)


@triton.jit
def _load_chunk(X, row, cols, mask, stride_x, t, tasks):
    """This program's chunk of ``row`` (task ``t``) in x's dtype; zeros past the end."""
    return tl.load(X + row * stride_x + cols, mask=mask & (cols * 0 + t < tasks), other=0.0)


@triton.jit
def _publish(PART, COUNT, row, x, C: tl.constexpr, chunk, t, tasks):
    """Store the chunk's sum of squares and arrive on ``row``'s counter; a task ``t >= tasks``
    (a step past the end) publishes nothing."""
    live = tl.full([], t, tl.int32) < tasks  # a tensor also where t is an int (interpreter)
    xf = x.to(tl.float32)
    tl.store(PART + row * C + chunk, tl.sum(xf * xf, axis=0), mask=live)
    tl.debug_barrier()  # every thread's part of the store before the (one-thread) release
    tl.atomic_add(COUNT + row, 1, mask=live, sem="release", scope="gpu")


@triton.jit
def _wait_and_scale(
    Y, RSTD, PART, COUNT, row, x, w, cols, mask, stride_y, N, eps, C: tl.constexpr, chunk
):  # fmt: skip
    """Wait until the C programs of ``row`` have published (acquire; also where C == 1: the
    partial was stored by one thread and is read by all), sum the C partials in chunk order
    (every program the same order: the same rstd), then scale this program's chunk ``x`` (x's
    dtype) by rstd and the weight chunk ``w`` and store it; chunk 0 stores rstd."""
    seen = tl.atomic_add(COUNT + row, 0, sem="acquire", scope="gpu")
    while seen < C:
        seen = tl.atomic_add(COUNT + row, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()
    parts = tl.load(PART + row * C + tl.arange(0, C), cache_modifier=".cg")
    rstd = 1.0 / tl.sqrt(tl.sum(parts, axis=0) / N + eps)
    y = x.to(tl.float32) * rstd * w.to(tl.float32)
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)
    if chunk == 0:
        tl.store(RSTD + row, rstd)


@triton.jit
def coop_forward_kernel(
    X,
    W,
    Y,
    RSTD,
    PART,  # (M, C) float32 partial sums of squares
    COUNT,  # (M,) int32 arrivals, zero before the launch
    M,
    N,
    stride_x,
    stride_y,
    stride_w,
    eps,
    C: tl.constexpr,
    CHUNK: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    chunk = pid % C  # constant over the walk: g is a multiple of C
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    w = tl.load(W + cols * stride_w, mask=mask, other=0.0)
    # PREFETCH: the next step's chunk is loaded (kept in x's dtype) before this step waits for
    # its partners, so the SM's loads go on through the wait.
    x_next = tl.load(X + tl.cast(pid // C, tl.int64) * stride_x + cols, mask=mask, other=0.0)
    for t in range(pid, M * C, g):
        row = tl.cast(t // C, tl.int64)
        if PREFETCH:
            x_in = x_next
            nxt = tl.cast(tl.minimum(t + g, M * C - 1) // C, tl.int64)
            x_next = tl.load(X + nxt * stride_x + cols, mask=mask, other=0.0)
        else:
            x_in = tl.load(X + row * stride_x + cols, mask=mask, other=0.0)
        _publish(PART, COUNT, row, x_in, C, chunk, t, M * C)
        _wait_and_scale(Y, RSTD, PART, COUNT, row, x_in, w, cols, mask, stride_y, N, eps, C, chunk)


@triton.jit
def coop_pipe_kernel(
    X, W, Y, RSTD, PART, COUNT, M, N, stride_x, stride_y, stride_w, eps,
    C: tl.constexpr,
    CHUNK: tl.constexpr,
    AHEAD: tl.constexpr,
):  # fmt: skip
    """The pipelined schedules. AHEAD = 1 (mode 2): step k+1's chunk is loaded, summed and
    published before step k waits, so a program's partners have a whole step to arrive (two
    chunks in registers). AHEAD = 2 (mode 3): also step k+2's load is issued first, so its
    latency hides behind step k+1's sum and step k's wait and store (three chunks). No deadlock
    either way: step 0 publishes before any wait, and a wait of step k needs only the partners'
    step-k publications, which they make before their own wait of step k-1."""
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    chunk = pid % C
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    w = tl.load(W + cols * stride_w, mask=mask, other=0.0)
    tasks = M * C
    x_cur = _load_chunk(X, _task_row(pid, tasks, C), cols, mask, stride_x, pid, tasks)
    _publish(PART, COUNT, _task_row(pid, tasks, C), x_cur, C, chunk, pid, tasks)
    if AHEAD == 2:  # (one step ahead loads it in the loop: no load of a chunk twice)
        x_n1 = _load_chunk(X, _task_row(pid + g, tasks, C), cols, mask, stride_x, pid + g, tasks)
    for t in range(pid, tasks, g):
        row = tl.cast(t // C, tl.int64)
        if AHEAD == 2:
            x_n2 = _load_chunk(
                X, _task_row(t + 2 * g, tasks, C), cols, mask, stride_x, t + 2 * g, tasks
            )
        else:
            x_n1 = _load_chunk(X, _task_row(t + g, tasks, C), cols, mask, stride_x, t + g, tasks)
        _publish(PART, COUNT, _task_row(t + g, tasks, C), x_n1, C, chunk, t + g, tasks)
        _wait_and_scale(Y, RSTD, PART, COUNT, row, x_cur, w, cols, mask, stride_y, N, eps, C, chunk)
        x_cur = x_n1
        if AHEAD == 2:
            x_n1 = x_n2


def coop_forward(x, w, eps, c, num_warps, per_sm, mode=1):
    """x: (M, N) with unit column stride; w: (N,). Returns y (x's dtype), rstd (M,) float32.
    ``mode``: 0 load then wait, 1 prefetch the next chunk before the wait, 2 / 3 the pipelined
    schedules, one / two steps ahead (:func:`coop_pipe_kernel`)."""
    m, n = x.shape
    chunk = triton.next_power_of_2(triton.cdiv(n, c))
    y = torch.empty_like(x)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    part = torch.empty(m, c, device=x.device, dtype=torch.float32)
    count = torch.zeros(m, device=x.device, dtype=torch.int32)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
    g = max(c, min(m * c, sms * per_sm) // c * c)
    kwargs = {"launch_cooperative_grid": True} if x.is_cuda and c > 1 else {}
    args = (x, w, y, rstd, part, count, m, n, x.stride(0), y.stride(0), w.stride(0), eps)
    if mode >= 2:
        coop_pipe_kernel[(g,)](
            *args, C=c, CHUNK=chunk, AHEAD=mode - 1, num_warps=num_warps, **kwargs
        )
    else:
        coop_forward_kernel[(g,)](
            *args, C=c, CHUNK=chunk, PREFETCH=bool(mode), num_warps=num_warps, **kwargs
        )
    return y, rstd


def us(fn, *args):
    """Median µs of ``fn(*args)`` (triton.testing.do_bench: L2 flushed before each call)."""
    from triton.testing import do_bench

    return do_bench(functools.partial(fn, *args), return_mode="median") * 1e3


def oracle(x, w, eps):
    x64 = x.double()
    r = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return (x64 * r * w.double()), r.squeeze(-1)


SHAPES = [(512, 131072), (256, 262144), (1024, 65536)]
#: fp32 values of x a thread keeps between the two halves, at most (more spills).
MAX_PER_THREAD = 64
# (C, warps, CTAs per SM): the chunk C divides the row into must fit registers (fp32 x kept
# between the two halves: CHUNK / (32 * warps) values a thread).
CONFIGS = [
    (c, w, s, pf)
    for c in (2, 4, 8, 16)
    for w in (8, 16, 32)
    for s in (1, 2, 4)
    for pf in (0, 1, 2, 3)
    if w * s <= 64  # 2048 threads an SM
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--shapes", default=None, help="e.g. 512x131072,256x262144")
    p.add_argument("--modes", default="0,1,2,3", help="schedules to time (see coop_forward)")
    args = p.parse_args()
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    eps = 1e-6
    out = []
    for m, n in shapes:
        if dev == "cpu":
            m, n = 3, 40  # the interpreter: C = 1 only (a smoke test of the arithmetic)
        x = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, device=dev, dtype=torch.bfloat16)
        want, want_r = oracle(x, w, eps)
        base_err = (rk.rmsnorm(x, w, eps).double() - want).abs().max().item()
        row = {"shape": f"{m}x{n}", "package_err": base_err, "configs": []}
        if dev == "cuda":
            row["package_us"] = us(rk.rmsnorm, x, w, eps)
            row["torch_us"] = us(torch.nn.functional.rms_norm, x, (n,), w, eps)
            print(f"{m}x{n} package {row['package_us']:.1f} us, F.rms_norm {row['torch_us']:.1f}")
        modes = {int(v) for v in args.modes.split(",")}
        for c, warps, per_sm, pf in (
            [k for k in CONFIGS if k[3] in modes]
            if dev == "cuda"
            else [(1, 4, 1, v) for v in modes]
        ):
            cfg = {"C": c, "warps": warps, "per_sm": per_sm, "mode": pf}
            if triton.next_power_of_2(triton.cdiv(n, c)) > MAX_PER_THREAD * 32 * warps:
                continue  # x would not stay in registers between the two halves: spills
            try:
                y, r = coop_forward(x, w, eps, c, warps, per_sm, pf)
                torch.cuda.synchronize() if dev == "cuda" else None
            except Exception as e:  # noqa: BLE001 (a config the SM cannot hold: record it)
                cfg["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                print(m, n, cfg)
                row["configs"].append(cfg)
                continue
            cfg["err"] = (y.double() - want).abs().max().item()
            cfg["rstd_err"] = (r.double() - want_r).abs().max().item()
            cfg["ok"] = cfg["err"] <= max(2 * base_err, 1e-2) and cfg["rstd_err"] < 1e-3
            if dev == "cuda" and cfg["ok"]:
                y2, _ = coop_forward(x, w, eps, c, warps, per_sm, pf)
                cfg["repeat_equal"] = bool(torch.equal(y, y2))
                cfg["us"] = us(coop_forward, x, w, eps, c, warps, per_sm, pf)
            print(m, n, cfg, flush=True)
            row["configs"].append(cfg)
        out.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

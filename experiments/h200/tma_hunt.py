"""Find which explicit TMA backward configs fault on the GPU (the config fuzz hit a CUDA
"misaligned address" on 2026-12-01: pipelined tiles under 128 bytes, now refused by name, which
this script records as "refused"). Cases run one per line of a worker; a worker that faults is
replaced, and every fault's case is written to OUT/faults.json.
    python3 experiments/h200/tma_hunt.py OUT [WORKERS]
"""

import itertools
import json
import os
import subprocess
import sys


def cases():
    for n, dtype, rows, stages, dh in itertools.product(
        [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        ["float32", "bfloat16", "float16"],
        [1, 2, 8],
        [1, 3],
        [False, True],
    ):
        if rows * n > 16384 or (stages > 1 and stages * 12 * rows * n > 192 << 10):
            continue
        yield {"n": n, "dtype": dtype, "rows": rows, "stages": stages, "dh": dh}


def run_one(case):
    import torch

    from rmsnorm_kernel import config, ops

    m, n, rows = 37, case["n"], case["rows"]
    dtype = getattr(torch, case["dtype"])
    rpp = rows * 3
    cfg = config.BackwardConfig(
        block=n,
        one_tile=True,
        groups=-(-m // rpp),
        rows_per_program=rpp,
        num_warps=4 if rows * n <= 4096 else 8,
        tree=False,
        dw_float64=False,
        stages=case["stages"],
        fanout=2,
        rows=rows,
        ctas=1,
        tma=True,
    )
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(m, n, generator=g) + 0.25).to("cuda", dtype)
    dy = torch.randn(m, n, generator=g).to("cuda", dtype)
    dh = torch.randn(m, n, generator=g).to("cuda", dtype) if case["dh"] else None
    w = (1 + 0.5 * torch.randn(n, generator=g)).to("cuda", dtype)
    _, _, rstd = ops.launch_forward(x, w, None, 1e-6, 0.0, dtype, llama=False)
    dx, dw = ops.launch_backward(dy, x, w, rstd, 0.0, dh, dtype, config=cfg)
    torch.cuda.synchronize()
    xd, wd, dyd = x.double(), w.double(), dy.double()
    r = (xd.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt()
    u = dyd * wd
    ref = r * u - xd * r**3 * (u * xd).mean(-1, keepdim=True)
    if dh is not None:
        ref = ref + dh.double()
    return float((dx.double() - ref).abs().max())


if __name__ == "__main__" and sys.argv[1] == "--worker":
    for line in sys.stdin:
        case = json.loads(line)
        print("START " + line.strip(), flush=True)
        try:
            err = run_one(case)
            print("OK " + json.dumps({**case, "err": err}), flush=True)
        except ValueError as e:  # ContractValueError: refused by name before any launch
            print("OK " + json.dumps({**case, "err": 0.0, "refused": str(e)[:120]}), flush=True)
        except Exception as e:  # a fault poisons the context: report and exit
            print("FAULT " + json.dumps({**case, "error": repr(e)[:200]}), flush=True)
            sys.exit(3)
    sys.exit(0)

if __name__ == "__main__":
    out = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    todo = list(cases())
    print(len(todo), "cases", flush=True)
    slices = [todo[i::workers] for i in range(workers)]
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    faults, oks = [], []

    def start(work):
        p = subprocess.Popen(
            [sys.executable, __file__, "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        p.stdin.write("".join(json.dumps(c) + "\n" for c in work))
        p.stdin.close()
        return p

    queue = [(start(s), s) for s in slices if s]
    while queue:
        p, work = queue.pop(0)
        lines = p.stdout.read().splitlines()
        p.wait()
        done = sum(1 for ln in lines if ln.startswith(("OK", "FAULT")))
        oks += [json.loads(ln[3:]) for ln in lines if ln.startswith("OK ")]
        started = [ln for ln in lines if ln.startswith("START ")]
        fault = [json.loads(ln[6:]) for ln in lines if ln.startswith("FAULT ")]
        if p.returncode != 0:
            culprit = fault[0] if fault else (json.loads(started[-1][6:]) if started else None)
            faults.append(culprit)
            print("FAULT", culprit, flush=True)
            rest = work[done if fault else max(len(started), 1) :]
            if rest:
                queue.append((start(rest), rest))
    worst = max(oks, key=lambda c: c["err"]) if oks else None
    print(f"{len(oks)} ok, {len(faults)} faults; worst error {worst}", flush=True)
    with open(os.path.join(out, "faults.json"), "w") as f:
        json.dump({"faults": faults, "ok": oks}, f, indent=1)

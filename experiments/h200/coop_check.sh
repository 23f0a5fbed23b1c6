#!/usr/bin/env bash
# The cooperative split-row forward (experiments/kernel_perf/coop_forward.py) on the device: every
# schedule and config under do_bench, then the best configs of the H100 under CUDA-graph replay
# beside the package, after its GPU test; then widefwd_ab.py. No carry. Writes $OUT/coop_pytest.log,
# coop.log, coop.json, coop_graph.log, widefwd_ab.log (~3 minutes in all).
#   bash experiments/h200/coop_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD/experiments/kernel_perf
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/coop.log"
# First the GPU test: 2 and 4 programs per row, every schedule, against float64 (~20 s)
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernel/test_experiment_coop_forward.py \
  > "$OUT/coop_pytest.log" 2>&1
echo "pytest rc=$?"; tail -1 "$OUT/coop_pytest.log"
timeout 150 python3 experiments/kernel_perf/coop_forward.py --shapes 512x131072,256x262144 \
  --json "$OUT/coop.json" 2>&1 | grep -v -i "warn\|too many blocks" >> "$OUT/coop.log"
echo "coop rc=$?"
timeout 90 python3 - <<'PY' 2>&1 | grep -v -i warn | tee "$OUT/coop_graph.log"
import functools

import torch
from triton.testing import do_bench_cudagraph

import rmsnorm_kernel as rk
from coop_forward import coop_forward

# (C, warps, per SM, mode): the H100's best of each schedule (kernel_perf/README.md, 36th
# session), and mode 3 (two steps ahead, never run yet) at the same geometry
CONFIGS = {
    (512, 131072): [(16, 8, 2, 3), (16, 8, 2, 2), (16, 8, 2, 1), (16, 16, 2, 1), (8, 16, 1, 1)],
    (256, 262144): [(16, 8, 1, 3), (16, 8, 1, 2), (16, 16, 1, 2), (8, 32, 1, 1), (8, 32, 1, 3)],
}
for (m, n), configs in CONFIGS.items():
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    base = do_bench_cudagraph(functools.partial(rk.rmsnorm, x, w, 1e-6)) * 1e3
    print(f"{m}x{n} package graph {base:.1f} us", flush=True)
    for cfg in configs:
        try:
            t = do_bench_cudagraph(functools.partial(coop_forward, x, w, 1e-6, *cfg)) * 1e3
            print(f"{m}x{n} coop {cfg} graph {t:.1f} us ({base / t:.3f}x the package)", flush=True)
        except Exception as e:  # a config this card cannot hold: say so, go on
            print(f"{m}x{n} coop {cfg} {type(e).__name__}: {str(e)[:160]}", flush=True)
PY
# Then the package's chunked forward, its `stream` config, wide_forward.py's hinted variant and the
# coop forward, interleaved round by round (kernel_perf/README.md, 36th session; ~60 s)
timeout 150 python3 experiments/kernel_perf/widefwd_ab.py 2>&1 | grep -v -i warn \
  | tee "$OUT/widefwd_ab.log"

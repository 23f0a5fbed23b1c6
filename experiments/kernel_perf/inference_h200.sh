#!/usr/bin/env bash
# The inference forward (no rstd when nothing will differentiate) on the H200, one call:
# the kernel tests (hypothesis GPU profile), then the host A/B against the previous commit's
# package (`inference` rows: rmsnorm on tensors that need no grad) and the shared host probe.
# On a fresh machine the kernel tests take ~4 min (every kernel compiled first), ~3 warm.
#   git archive <previous commit> src/rmsnorm_kernel | tar -x -C ab_old   (untracked: it travels)
#   bash experiments/kernel_perf/inference_h200.sh "$OUT"
set -u
out=${1:?usage: inference_h200.sh OUTDIR}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
t0=$SECONDS
HYPOTHESIS_PROFILE=gpu timeout 420 python3 -m pytest -q -p no:cacheprovider -n 8 -rfE tests/kernel \
  > "$out/pytest_kernel_gpu.log" 2>&1
echo "pytest rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
tail -2 "$out/pytest_kernel_gpu.log"; grep -E "^(FAILED|ERROR)" "$out/pytest_kernel_gpu.log" | head
t0=$SECONDS
timeout 150 python3 experiments/kernel_perf/host_ab.py --old ab_old/src --rounds 25 --calls 1000 \
  --json "$out/host_ab.json" > "$out/host_ab.txt" 2>&1
echo "host_ab rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
cat "$out/host_ab.txt"
timeout 90 python3 experiments/kernel_perf/host_cost.py > "$out/host_cost.txt" 2>&1
grep -E "host us/call|/ F.rms_norm" "$out/host_cost.txt"

#!/usr/bin/env bash
# One device call: GPU kernel tests (hypothesis GPU profile), host cost, tuning and peer figures,
# then (BENCH_S > 0) `make bench`'s command without quack and the curves (BENCH_ARGS: overrides).
#   bash experiments/kernel_perf/gpu_run.sh "$OUT" [TEST_S TUNE_S PARTS]
# Each step has its own time limit, so a slow step never costs the others' results.
set -u
out=${1:?usage: gpu_run.sh OUTDIR}
test_s=${2:-150}; tune_s=${3:-120}; parts=${4:-peers,bwd,acc,fwd}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
if ls .whl/*.whl >/dev/null 2>&1; then  # liger, and hydra for the bench command
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
  python3 -c "import torch, triton, yaml, hypothesis; print('torch', torch.__version__, 'triton', triton.__version__, 'hypothesis', hypothesis.__version__)"
} 2>&1 | tee "$out/env.txt"
t0=$SECONDS
HYPOTHESIS_PROFILE=gpu timeout "$test_s" python3 -m pytest -q -p no:cacheprovider -n 8 -rfE tests/kernel \
  > "$out/pytest.log" 2>&1
echo "pytest rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
tail -25 "$out/pytest.log"
t0=$SECONDS
timeout 30 python3 experiments/kernel_perf/host_cost.py > "$out/host_cost.log" 2>&1
echo "host_cost rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
head -9 "$out/host_cost.log"; grep -A12 "tottime" "$out/host_cost.log" | head -14
t0=$SECONDS
timeout "$tune_s" python3 experiments/kernel_perf/tune.py --out "$out/tune.json" --parts "$parts" \
  > "$out/tune.log" 2>&1
echo "tune rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
grep '^{' "$out/tune.log" | cut -c1-200 | tail -60
if [ "${BENCH_S:-0}" -gt 0 ]; then
  t0=$SECONDS
  timeout "$BENCH_S" python3 -m rmsnorm_kernel.cli bench "benchmark.out_dir=$out/bench" \
    'benchmark.implementations=[ours,torch,compile,liger]' benchmark.curves.enabled=false \
    ${BENCH_ARGS:-} > "$out/bench.log" 2>&1
  echo "bench rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
  tail -45 "$out/bench.log"
fi

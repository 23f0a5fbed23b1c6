#!/usr/bin/env bash
# The bench's host row alone, with its interleaved rounds (benchmark.host.rounds), in two separate
# processes, beside the shared host probe twice, then the bench's GPU test. Carry .whl (Liger).
#   bash experiments/h200/host_rounds.sh "$OUT"
set -u
out=${1:?usage: host_rounds.sh OUTDIR}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
for i in 1 2; do
  timeout 150 python3 -m rmsnorm_kernel.cli bench "benchmark.out_dir=$out/host_$i" \
    "benchmark.implementations=[ours,torch,compile,liger]" "benchmark.modes=[graph]" \
    "benchmark.shapes=[{m:128,n:257,dtype:float32}]" benchmark.memory=false \
    benchmark.curves.enabled=false > "$out/host_$i.log" 2>&1
  echo "bench host $i rc=$?"; grep -A8 "host cost per call" "$out/host_$i.log" | head -9
done
for i in 1 2; do
  timeout 60 python3 experiments/llama/probes/host_cost.py > "$out/host_cost_$i.log" 2>&1
  echo "host_cost $i rc=$?"; head -3 "$out/host_cost_$i.log"
done
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/cli/test_bench.py > "$out/pytest_bench.log" 2>&1
echo "pytest rc=$?"; tail -3 "$out/pytest_bench.log"

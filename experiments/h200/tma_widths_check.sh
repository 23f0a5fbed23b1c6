#!/usr/bin/env bash
# One call after a change to the TMA backward's widths (config.BWD_TMA): the kernel tests of the
# launch paths, tune.py part tmanew at the changed widths (the heuristic beside a few plans, dx
# checked), then `bench` in graph mode on the hidden sizes of released models (no quack: its
# libraries need two calls, bench.sh), ours beside torch, compile and Liger.
#   bash experiments/h200/tma_widths_check.sh "$OUT"   (carry .whl)
# TMA_NEW / TMA_NEW_PLANS (tune.py) and MODEL_SHAPES (a Hydra list) override the defaults.
set -u
out=${1:?usage: tma_widths_check.sh OUTDIR}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
t0=$SECONDS
HYPOTHESIS_PROFILE=gpu timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 -rfE \
  tests/kernel/test_tma_backward.py tests/kernel/test_pdl.py tests/kernel/test_config.py \
  tests/kernel/test_config_fuzz.py tests/kernel/test_gpu.py tests/kernel/test_launch.py \
  > "$out/pytest.log" 2>&1
echo "pytest rc=$? wall=$((SECONDS - t0))s"
tail -3 "$out/pytest.log"; grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -20
export TMA_NEW=${TMA_NEW:-4096x256:bfloat16,8192x256:bfloat16,16384x256:bfloat16,262144x256:bfloat16,4096x512:float32,8192x512:float32,131072x512:float32}
export TMA_NEW_PLANS=${TMA_NEW_PLANS:-16,1,3,4;16,2,3,4;4,2,3,4}
t0=$SECONDS
timeout 90 python3 experiments/kernel_perf/tune.py --parts tmanew --out "$out/tmanew.json" \
  > "$out/tmanew.log" 2>&1
echo "tmanew rc=$? wall=$((SECONDS - t0))s"
shapes=${MODEL_SHAPES:-"[{m:524288,n:128,dtype:bfloat16},{m:16384,n:896,dtype:bfloat16},{m:16384,n:1536,dtype:bfloat16},{m:16384,n:2560,dtype:bfloat16},{m:16384,n:3072,dtype:bfloat16},{m:16384,n:3584,dtype:bfloat16},{m:16384,n:5120,dtype:bfloat16},{m:8192,n:7168,dtype:bfloat16},{m:16384,n:3072,dtype:float32}]"}
t0=$SECONDS
timeout 240 python3 -m rmsnorm_kernel.cli bench "benchmark.out_dir=$out/models" \
  "benchmark.shapes=$shapes" benchmark.curves.enabled=false benchmark.host.enabled=false \
  "benchmark.modes=[graph]" "benchmark.implementations=[ours,torch,compile,liger]" \
  > "$out/models.log" 2>&1
echo "models bench rc=$? wall=$((SECONDS - t0))s"
tail -45 "$out/models.log"

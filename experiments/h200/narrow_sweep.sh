#!/usr/bin/env bash
# One call for short rows (the per-head q/k norms of Qwen3-style models: N = 64 / 128): tune.py
# part narrow (the forward's rows kernel, the several-rows backward with the tree and the sum
# finish) and part tmanew (the TMA backward, both deals), then the GPU test of cached launches.
#   bash experiments/h200/narrow_sweep.sh "$OUT"   (carry .whl)
set -u
out=${1:?usage: narrow_sweep.sh OUTDIR}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
export NARROW=${NARROW:-524288x128,65536x128,1048576x64}
t0=$SECONDS
timeout 240 python3 experiments/kernel_perf/tune.py --parts narrow --out "$out/narrow.json" \
  > "$out/narrow.log" 2>&1
echo "narrow rc=$? wall=$((SECONDS - t0))s"
export TMA_NEW=${TMA_NEW:-524288x128:bfloat16,65536x128:bfloat16,16384x128:bfloat16,1048576x64:bfloat16}
export TMA_NEW_PLANS=${TMA_NEW_PLANS:-16,1,3,4;16,2,3,4;16,4,3,4;32,1,3,4;32,2,3,4;32,4,3,4;32,2,4,4;64,1,3,4;64,2,3,4;64,1,4,4;32,2,3,8;64,1,3,8}
t0=$SECONDS
timeout 200 python3 experiments/kernel_perf/tune.py --parts tmanew --out "$out/tmanarrow.json" \
  > "$out/tmanarrow.log" 2>&1
echo "tmanew rc=$? wall=$((SECONDS - t0))s"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernel/test_gpu.py -k cached \
  > "$out/pytest.log" 2>&1
echo "pytest rc=$?"; tail -2 "$out/pytest.log"

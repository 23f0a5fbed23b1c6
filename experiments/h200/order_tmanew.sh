#!/usr/bin/env bash
# Two measurements owed to issue 17 since the twenty-ninth session, in one call (under ~360 s):
#   1. order_probe.py: why the bench's curves time our N = 4096 forward 1-2 us above its table;
#   2. tune.py part tmanew at the float32 widths the TMA backward does not take yet (128, 64).
# Carry .whl (hydra, omegaconf, liger-kernel, ...: bash experiments/h200/wheels.sh builds it):
#   bash experiments/h200/order_tmanew.sh "$OUT"
set -u
out=${1:?usage: order_tmanew.sh OUTDIR}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
step() {  # step NAME TIMEOUT CMD...: run, log under $out, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
}
step order 120 python3 experiments/kernel_vs_peers/order_probe.py --out "$out/order.json"
tail -12 "$out/order.log"
TMA_NEW=524288x128:float32,1048576x64:float32 step tmanew 220 \
  python3 experiments/kernel_perf/tune.py --parts tmanew --out "$out/tmanew.json"
tail -20 "$out/tmanew.log"
cat "$out/summary.txt"

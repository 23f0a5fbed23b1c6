#!/usr/bin/env bash
# One call after ROWS_TILE_BY_BLOCK / ROWS_WARPS_BY_BLOCK took 16 rows at 4 warps at 64 and 128
# columns: tune.py part narrowfwd on float32 rows and on bf16 with rstd stored (the training
# forward), the old heuristic (64 rows / 32 rows at 8 warps) timed beside the new one; then the
# forward's GPU tests.
#   bash experiments/h200/narrowfwd_check.sh "$OUT"
set -u
out=${1:?usage: narrowfwd_check.sh OUTDIR}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
export NARROW_FWD=1048576x64,524288x128 NARROW_FWD_EXTRA="64:64:8;128:32:8"
for run in float32:0 bfloat16:1; do
  t0=$SECONDS
  NARROW_FWD_DTYPE=${run%:*} NARROW_FWD_RSTD=${run#*:} timeout 200 python3 \
    experiments/kernel_perf/tune.py --parts narrowfwd --out "$out/narrowfwd_${run%:*}.json" \
    > "$out/narrowfwd_${run%:*}.log" 2>&1
  echo "narrowfwd $run rc=$? wall=$((SECONDS - t0))s"
done
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernel -k "forward or rows or config" \
  > "$out/pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$out/pytest.log"

#!/usr/bin/env bash
# The evict_last question in one call (carry .whl for Liger; ~4 minutes, ~8 with the cluster
# figures on an H200): tune.py part fwdhint (the heuristic with and without the hint, on the same
# x each call and on x rotated over 256 MiB), then part fwdwarps at five one-pass shapes, then, on
# an H200, cluster_h200.sh (the owed cluster figures). Writes $OUT/fwdhint.{json,log},
# fwdwarps.{json,log}, summary.txt (and cluster_h200.sh's files).
#   OUT=... bash experiments/h200/hint_h200.sh
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu" | tee "$OUT/summary.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src:$PWD/experiments/kernel_perf
show() {  # show JSON: each shape's variants, fastest first
  python3 - "$1" <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
by = collections.defaultdict(list)
for r in d["rows"]:
    name, dt = r["variant"].rsplit(" ", 1)
    by[(r["M"], r["N"], dt)].append((r["us"], name))
for k, v in by.items():
    print(k, " | ".join(f"{n} {u:.2f}" for u, n in sorted(v)))
PY
}
t0=$SECONDS
timeout 220 python3 experiments/kernel_perf/tune.py --parts fwdhint --out "$OUT/fwdhint.json" \
  > "$OUT/fwdhint.log" 2>&1
echo "fwdhint rc=$? wall=$((SECONDS - t0))s" | tee -a "$OUT/summary.txt"; show "$OUT/fwdhint.json"
grep -m3 -A3 "Traceback" "$OUT/fwdhint.log"
t0=$SECONDS
FWD_WARPS=4096x8192,8192x8192,1024x16384,4096x16384,8192x16384 timeout 150 python3 \
  experiments/kernel_perf/tune.py --parts fwdwarps --out "$OUT/fwdwarps.json" > "$OUT/fwdwarps.log" 2>&1
echo "fwdwarps rc=$? wall=$((SECONDS - t0))s" | tee -a "$OUT/summary.txt"; show "$OUT/fwdwarps.json"
if [[ "$gpu" == *H200* ]]; then
  t0=$SECONDS; OUT=$OUT bash experiments/h200/cluster_h200.sh
  echo "cluster wall=$((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
fi

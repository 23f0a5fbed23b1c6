#!/usr/bin/env bash
# Issue 17's two fwd+bwd shapes at the edge of the 1.05x-quack target (bench 2026-12-04e:
# 131072x512 bf16 1.019x, 65536x1024 bf16 1.047x): the TMA backward's grid-stride deal over a
# wider plan space than BWD_TMA_STRIDED's: rows per step 1-8, 2-7 programs per SM (the
# twenty-sixth session's sweep at these widths found 3 per SM 5-10% ahead of 2 and 4; it tried
# one rows-per-step value each), 2-4 stages, 4 warps and some 8; the heuristic timed first and
# last. One call, ~200 s; carry .whl:
#   bash experiments/h200/edge_tune.sh "$OUT"
set -u
out=${1:?usage: edge_tune.sh OUTDIR}
json=${EDGE_JSON:-$out}  # where tune.py's JSON goes (its log holds the same rows, line by line)
mkdir -p "$json"
export PYTHONUNBUFFERED=1
[ -d /tmp/site/hydra ] ||  # (tests_then_tune.sh installed them already)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
plans512="2,3,2,4;2,3,3,4;2,3,4,4;2,4,2,4;2,4,3,4;2,4,4,4;2,5,2,4;2,5,3,4;2,5,4,4;2,6,2,4;2,6,3,4"
plans512+=";2,6,4,4;4,3,2,4;4,3,3,4;4,3,4,4;4,4,2,4;4,4,3,4;4,4,4,4;4,5,2,4;4,5,3,4;4,5,4,4;4,6,2,4"
plans512+=";4,6,3,4;4,6,4,4;8,3,2,4;8,3,3,4;8,3,4,4;8,4,2,4;8,4,3,4;8,5,2,4;8,6,2,4;2,3,3,8;2,4,3,8"
plans512+=";4,3,3,8;4,4,3,8"
plans1024="1,2,2,4;1,2,3,4;1,2,4,4;1,3,2,4;1,3,3,4;1,3,4,4;1,4,2,4;1,4,3,4;1,4,4,4;1,5,2,4;1,5,3,4"
plans1024+=";1,5,4,4;2,2,2,4;2,2,3,4;2,2,4,4;2,3,2,4;2,3,3,4;2,3,4,4;2,4,2,4;2,4,3,4;2,4,4,4;2,5,2,4"
plans1024+=";2,5,3,4;2,5,4,4;4,2,2,4;4,2,3,4;4,2,4,4;4,3,2,4;4,3,3,4;4,3,4,4;4,4,2,4;4,4,3,4;4,5,2,4"
plans1024+=";1,3,3,8;1,4,3,8;2,3,3,8;2,4,3,8"
# (thirty-fifth session, H100: the best plan was 1 row, 5 per SM, at the sweep's edge; past it)
plans1024+=";1,6,2,4;1,6,3,4;1,6,4,4;1,7,3,4;2,6,2,4;2,6,3,4"
step() {  # step NAME TIMEOUT CMD...: run, log under $out, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
}
TMA_NEW=131072x512:bfloat16 TMA_NEW_DEALS=strided TMA_NEW_PLANS="$plans512" step tma512 200 \
  python3 experiments/kernel_perf/tune.py --parts tmanew --out "$json/tma512.json"
TMA_NEW=65536x1024:bfloat16 TMA_NEW_DEALS=strided TMA_NEW_PLANS="$plans1024" step tma1024 200 \
  python3 experiments/kernel_perf/tune.py --parts tmanew --out "$json/tma1024.json"
# The chunked forward of wide rows (bench 2026-12-04e: 512x131072 / 256x262144 bf16 0.70x
# quack): wide_forward.py's pass-2 hints (evict_first loads, streaming stores) and order beside
# the package's default, which since the sixteenth session hints only pass 1 (evict_last).
WIDE_FWD=512x131072,256x262144 step widefwd 120 \
  python3 experiments/kernel_perf/tune.py --parts widefwd --out "$json/widefwd.json"
for f in "$out"/tma512.log "$out"/tma1024.log "$out"/widefwd.log; do
  python3 - "$f" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
for r in [r for r in rows if r["variant"].startswith(("heuristic", "default"))] + ok[:8]:
    print(r["M"], r["N"], r["variant"], round(r["us"], 2), r.get("dx_diff", r.get("max_err")))
PY
done
cat "$out/summary.txt"

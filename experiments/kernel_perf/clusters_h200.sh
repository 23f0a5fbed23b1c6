#!/usr/bin/env bash
# One device call for the work the sixth session of 2026-11-30 wrote without a GPU: the GPU tests
# of the new code (thread-block clusters, torch.func transforms, autocast, the config fuzz with
# clusters drawn), then the cluster and TMA sweeps (tune.py parts ctas and tmabwd). Run from the
# repo root on the H200 image (no wheels needed):
#   bash experiments/kernel_perf/clusters_h200.sh "$OUT"      (about 8 minutes)
set -u
out=${1:?usage: clusters_h200.sh OUTDIR}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
step() {  # step NAME TIMEOUT CMD...: run, log, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
  tail -${TAIL:-4} "$out/$name.log"
}
HYPOTHESIS_PROFILE=gpu TAIL=12 step pytest 200 python3 -m pytest -q -p no:cacheprovider -n 8 -rfE \
  tests/kernel/test_clusters.py tests/kernel/test_func_transforms.py tests/kernel/test_autocast.py \
  tests/kernel/test_config_fuzz.py tests/kernel/test_launch.py
step ctas 200 python3 experiments/kernel_perf/tune.py --out "$out/ctas.json" --parts ctas
step tmabwd 150 python3 experiments/kernel_perf/tune.py --out "$out/tma.json" --parts tmabwd
python3 - "$out" <<'EOF' | tee "$out/best.txt"
import json, sys
for name in ("ctas", "tma"):
    try:
        rows = json.load(open(f"{sys.argv[1]}/{name}.json"))["rows"]
    except Exception as e:  # noqa: BLE001
        print(name, "no results:", e)
        continue
    shapes = {}
    for r in rows:
        kind = "fwd" if r["variant"].startswith("fwd") else "bwd"
        shapes.setdefault((r["M"], r["N"], r.get("dtype", ""), kind), []).append(r)
    for key, rs in shapes.items():
        ok = [r for r in rs if "us" in r]
        default = [r for r in ok if "default" in r["variant"]]
        best = min((r for r in ok if "default" not in r["variant"]), key=lambda r: r["us"], default=None)
        errors = sum("error" in r for r in rs)
        print(name, key, "default", round(default[0]["us"], 1) if default else None,
              "best", (best["variant"], round(best["us"], 1)) if best else None, "errors", errors)
EOF

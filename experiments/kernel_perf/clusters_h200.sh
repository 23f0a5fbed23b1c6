#!/usr/bin/env bash
# GPU tests and tune.py parts on the image's Triton and on a carried Triton 3.9 (what runs: the
# *_TESTS / *_PARTS variables below). Clusters need Triton >= 3.8 and the H200 image has 3.6,
# so a slimmed Triton 3.9 (cp312; no AMD backend, Blackwell ptxas, CUPTI or proton) travels as a
# 105 MB tar.xz split in two git-ignored folders, over the 64 MiB a call carries:
#   PART=a bash experiments/kernel_perf/clusters_h200.sh "$OUT"     carry [".t39a"]  (seconds)
#   bash experiments/kernel_perf/clusters_h200.sh "$OUT"            carry [".t39b"]  (~4 min)
# The second call must follow the first while the machine is warm (~30 s). Without the parts the
# cluster cases run on the image's Triton, where they check the refusal only.
# How the parts are unpacked and rebuilt: triton39.sh.
set -u
out=${1:?usage: clusters_h200.sh OUTDIR}
if [ "${PART:-}" = a ]; then
  mkdir -p /root/t39 && cp .t39a/* /root/t39/ && ls -la /root/t39
  exit 0
fi
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
step() {  # step NAME TIMEOUT CMD...: run, log, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
  tail -${TAIL:-4} "$out/$name.log"
}
# What runs (defaults: the sixth session's plan): tests and tune.py parts on the image's Triton
# (IMAGE_TESTS, IMAGE_PARTS; ONLY=t39 skips them), then under Triton 3.9 (T39_TESTS, T39_PARTS).
IMAGE_TESTS=${IMAGE_TESTS:-"tests/kernel/test_clusters.py tests/kernel/test_func_transforms.py
  tests/kernel/test_autocast.py tests/kernel/test_config_fuzz.py tests/kernel/test_launch.py"}
IMAGE_PARTS=${IMAGE_PARTS:-tmabwd}
T39_TESTS=${T39_TESTS:-"tests/kernel/test_clusters.py tests/kernel/test_config_fuzz.py
  tests/kernel/test_gpu.py"}
T39_PARTS=${T39_PARTS:-ctas}
# 1. The image's Triton (3.6).
if [ "${ONLY:-}" != t39 ]; then
  HYPOTHESIS_PROFILE=gpu TAIL=12 step pytest_image 200 \
    python3 -m pytest -q -p no:cacheprovider -n 8 -rfE $IMAGE_TESTS
  step parts_image 200 python3 experiments/kernel_perf/tune.py --out "$out/image.json" \
    --parts "$IMAGE_PARTS"
fi
# 2. Triton 3.9 (carried): clusters for real.
if [ -f /root/t39/t39part.00 ] && [ -f .t39b/t39part.01 ]; then
  source experiments/kernel_perf/triton39.sh
  use_triton39 /root/t39/t39part.00 .t39b/t39part.01 >> "$out/summary.txt"  # no pipe: it exports
  tail -1 "$out/summary.txt"
  HYPOTHESIS_PROFILE=gpu TAIL=12 step pytest_t39 "${T39_TEST_S:-200}" python3 -m pytest -q -p no:cacheprovider \
    -n 8 -rfE $T39_TESTS
  step parts_t39 200 python3 experiments/kernel_perf/tune.py --out "$out/t39.json" \
    --parts "$T39_PARTS"
else
  echo "no Triton 3.9 parts (/root/t39/t39part.00 and .t39b/t39part.01): clusters not measured" \
    | tee -a "$out/summary.txt"
fi
python3 - "$out" <<'EOF' | tee "$out/best.txt"
import json, sys
for name in ("image", "t39"):
    try:
        data = json.load(open(f"{sys.argv[1]}/{name}.json"))
    except Exception as e:  # noqa: BLE001
        print(name, "no results:", e)
        continue
    print(name, data["meta"])
    for r in data["rows"]:
        print(name, r["part"], r["M"], r["N"], r["variant"], round(r["us"], 1) if "us" in r
              else r.get("error", "")[:120])
EOF

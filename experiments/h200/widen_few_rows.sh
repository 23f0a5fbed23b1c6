#!/usr/bin/env bash
# The fifty-fourth session's changes on an H200 in one call (carry .whl; ~7 minutes): their GPU
# tests, the float16 widening A/B (widen_ab.py: the package as it is, cvt.f32.f16, against a copy
# of src/ with kernels.FP16_WIDEN_CVT off, alternating processes), the few-rows forward rule
# with x rotated (tune.py part fwdhint, FEW_ROWS_FORWARD's shapes; the heuristic is the 32-warp
# unhinted config there; 8 warps hinted the rule it replaced) and the cluster forward's plans
# (split_tune.py --pkg-cluster on the package; until the fifty-seventh session it also timed a
# copy widening fp16 by cvt, which the package now does where uncapped). Writes
# $OUT/summary.txt, pytest.log, widen.txt, fwdhint.log, cap_pkg.txt and their JSON.
#   [PARTS=...] bash experiments/h200/widen_few_rows.sh "$OUT"
# PARTS: a comma list of tests, widen, fwdhint, cluster; timing = widen,fwdhint,cluster (default:
# all four, in that order).
set -u
out=${1:?usage: widen_few_rows.sh OUTDIR}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/summary.txt"
parts=${PARTS:-tests,timing}
parts=${parts//timing/widen,fwdhint,cluster}
if [[ $parts == *tests* ]]; then
  t0=$SECONDS
  HYPOTHESIS_PROFILE=gpu PYTHONPATH=$PWD/src timeout 200 python3 -m pytest -q -p no:cacheprovider \
    -n 8 -rfE tests/kernel/test_forward_variants.py tests/kernel/test_config.py \
    tests/kernel/test_cluster_backward.py tests/kernel/test_cluster_forward.py \
    tests/kernel/test_backend.py > "$out/pytest.log" 2>&1
  echo "pytest rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
  tail -1 "$out/pytest.log" | tee -a "$out/summary.txt"
fi
if [[ $parts == *widen* ]]; then
  rm -rf /tmp/srcbits && cp -r src /tmp/srcbits
  sed -i 's/^FP16_WIDEN_CVT = tl.constexpr(.*)$/FP16_WIDEN_CVT = tl.constexpr(False)/' \
    /tmp/srcbits/rmsnorm_kernel/kernels/common.py
  grep -c "^FP16_WIDEN_CVT = tl.constexpr(False)" /tmp/srcbits/rmsnorm_kernel/kernels/common.py || exit 1
  t0=$SECONDS
  for v in cvt bits cvt2 bits2; do
    case $v in cvt*) S=$PWD/src;; bits*) S=/tmp/srcbits;; esac
    PYTHONPATH=$S timeout 120 python3 experiments/kernel_perf/widen_ab.py --label $v \
      --json "$out/widen_$v.json" 2>&1 | grep -v -i warn | tee -a "$out/widen.txt"
  done
  echo "widen wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/experiments/kernel_perf
if [[ $parts == *fwdhint* ]]; then
  t0=$SECONDS
  FWD_HINT=256x16384,512x16384,1024x16384,2048x16384,4096x16384 FWD_HINT_WARPS=8,32 \
    timeout 100 python3 experiments/kernel_perf/tune.py --parts fwdhint --out "$out/fwdhint.json" \
    > "$out/fwdhint.log" 2>&1
  echo "fwdhint rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
fi
[[ $parts == *cluster* ]] || exit 0
# The cluster forward as the package has it since the fifty-seventh session (fp16 widened by
# cvt.f32.f16 where uncapped, from its bits under the register cap), with each shape's plans,
# the uncapped ones and, where the heuristic takes a cluster plan, the rules without it.
t0=$SECONDS
timeout 80 python3 experiments/kernel_perf/split_tune.py --quick --pkg-cluster --rounds 3 \
  --rep 15 --shapes 512x131072,256x262144 --json "$out/cap_pkg.json" 2>&1 | grep -v -i warn \
  > "$out/cap_pkg.txt"
echo "cluster forward wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"

#!/usr/bin/env bash
# The float32 128 / 64-column TMA backward plans (config.BWD_TMA, thirty-first session), in one
# call: tune.py part tmajoin over M against the pointer heuristic, then the GPU tests of the
# launch path they touch. Carry .whl:  bash experiments/h200/fp32_qk_tma.sh "$OUT"
set -u
out=${1:?usage: fp32_qk_tma.sh OUTDIR}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
  > /dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
step() {  # step NAME TIMEOUT CMD...: run, log under $out, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
}
step tmajoin 150 python3 experiments/kernel_perf/tune.py --parts tmajoin --out "$out/tmajoin.json"
grep -o '"M": [0-9]*, "N": [0-9]*, "variant": "[^"]*"\|"dx_diff": [^,]*\|"us": [0-9.]*' \
  "$out/tmajoin.log" | paste - - - - | sed 's/"//g'
HYPOTHESIS_PROFILE=gpu step pytest 240 python3 -m pytest -q -p no:cacheprovider -n 8 -rfE \
  tests/kernel/test_tma_backward.py tests/kernel/test_config.py tests/kernel/test_config_fuzz.py \
  tests/kernel/test_gpu.py tests/kernel/test_backward_rows.py tests/kernel/test_fuzz.py
tail -3 "$out/pytest.log"
cat "$out/summary.txt"

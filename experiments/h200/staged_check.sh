#!/usr/bin/env bash
# The staged split-row forward (ForwardConfig.split with stages > 1: the chunk loads pipelined
# into shared memory, 38th session) on the device: its GPU tests, its sm_90 build check and the
# split tests, then split_tune.py --staged beside the heuristic, the chunked walk, coop_forward.py's
# mode 3 and the cg variant, on the bench's widest shapes and at 65536 / 32768 columns (where the
# heuristic keeps one row in a program). No carry. Writes $OUT/staged_pytest.log,
# staged_tune.log, staged_tune.json (~8-9 minutes).
#   [SHAPES=512x131072,...] bash experiments/h200/staged_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD/experiments/kernel_perf
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/staged_tune.log"
timeout "${PYTEST_S:-240}" python3 -m pytest -q -p no:cacheprovider tests/kernel/test_split_forward.py \
  tests/kernel/test_split_staged_build.py tests/kernel/test_experiment_split_variants.py \
  "tests/kernel/test_gpu.py::test_wide_rows_gpu" \
  > "$OUT/staged_pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/staged_pytest.log"
timeout "${TUNE_S:-300}" python3 experiments/kernel_perf/split_tune.py --quick --staged --coop \
  --variants cg --rounds 3 \
  --shapes "${SHAPES-512x131072,256x262144,64x1048576,1024x65536,2048x32768}" \
  --json "$OUT/staged_tune.json" 2>&1 | grep -v -i warn | tee -a "$OUT/staged_tune.log"

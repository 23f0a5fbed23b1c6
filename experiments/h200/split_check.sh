#!/usr/bin/env bash
# The split-row forward (ForwardConfig.split) on the device: its GPU tests and the tests whose
# shapes the heuristic now gives it, then split_tune.py on the shapes it takes (graph replay,
# every (block, warps), the chunked walk, coop_forward.py's mode 3 and the kernel variants of
# split_tune.VARIANTS beside it, 3 interleaved rounds). No carry. Writes $OUT/split_pytest.log,
# split_tune.log, split_tune.json (~5-7 minutes).
#   [VARIANTS=carry,cg] bash experiments/h200/split_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD/experiments/kernel_perf
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/split_tune.log"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernel/test_split_forward.py \
  tests/kernel/test_experiment_split_variants.py "tests/kernel/test_gpu.py::test_wide_rows_gpu" \
  > "$OUT/split_pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/split_pytest.log"
timeout 330 python3 experiments/kernel_perf/split_tune.py --min-n 100000 --coop \
  --variants "${VARIANTS-carry,cg,carry_cg}" --json "$OUT/split_tune.json" 2>&1 \
  | grep -v -i warn | tee -a "$OUT/split_tune.log"

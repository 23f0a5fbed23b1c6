#!/usr/bin/env bash
# How a split row's programs meet (39th session, experiments only): the GPU tests of
# wide_split.py's and cluster_split.py's kernels, then split_tune.py --wide-sync --word --cluster
# --coop: the wide split with every thread spinning (the package's way), one lane a warp
# spinning, and no wait at all (wrong values, the bound); the slot-word split (no counters,
# atomics or fences); a row over the CTAs of one hardware cluster (one cluster barrier a row, no
# persistent grid); beside the heuristic and coop mode 3. No carry. Writes $OUT/sync_pytest.log,
# sync_tune.log, sync_tune.json (~6-7 minutes).
#   [SHAPES=512x131072,...] bash experiments/h200/sync_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD/experiments/kernel_perf
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/sync_tune.log"
timeout "${PYTEST_S:-150}" python3 -m pytest -q -p no:cacheprovider \
  tests/kernel/test_experiment_wide_split.py > "$OUT/sync_pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/sync_pytest.log"
timeout "${TUNE_S:-240}" python3 experiments/kernel_perf/split_tune.py --quick --wide-sync --word \
  --cluster --coop --rounds 3 --shapes "${SHAPES-512x131072,256x262144,64x1048576,1024x65536}" \
  --json "$OUT/sync_tune.json" 2>&1 | grep -v -i warn | tee -a "$OUT/sync_tune.log"

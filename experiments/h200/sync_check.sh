#!/usr/bin/env bash
# How a split row's programs meet (39th session, experiments only): the GPU tests of
# wide_split.py's and cluster_split.py's kernels, then split_tune.py --wide-sync --word --cluster
# --coop: the wide split with every thread spinning (the package's way), one lane a warp
# spinning, and no wait at all (wrong values, the bound); the slot-word split (no counters,
# atomics or fences); a row over the CTAs of one hardware cluster (one cluster barrier a row, no
# persistent grid); beside the heuristic and coop mode 3. No carry. Writes $OUT/sync_pytest.log,
# sync_tune.log, sync_tune.json,
# cluster_tune.json (~8-9 minutes).
#   [SHAPES=512x131072,...] bash experiments/h200/sync_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD/experiments/kernel_perf
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/sync_tune.log"
timeout "${PYTEST_S:-150}" python3 -m pytest -q -p no:cacheprovider \
  tests/kernel/test_experiment_wide_split.py > "$OUT/sync_pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/sync_pytest.log"
timeout "${TUNE_S:-200}" python3 experiments/kernel_perf/split_tune.py --quick --wide-sync --word \
  --coop --rounds 3 --shapes "${SHAPES-512x131072,256x262144,64x1048576,1024x65536}" \
  --json "$OUT/sync_tune.json" 2>&1 | grep -v -i warn | tee -a "$OUT/sync_tune.log"
# The cluster launch in a process of its own: a launch the driver refuses badly cannot spoil the
# timings above.
timeout "${CLUSTER_S:-180}" python3 experiments/kernel_perf/split_tune.py --quick --cluster \
  --rounds 3 --shapes "${SHAPES-512x131072,256x262144,1024x65536,2048x32768}" \
  --json "$OUT/cluster_tune.json" 2>&1 | grep -v -i warn | tee -a "$OUT/sync_tune.log"

#!/usr/bin/env bash
# How a split row's programs meet (39th-40th sessions). In order, within one device call:
# 1. the package's cluster forward's tests (ForwardConfig.cluster: a row over the CTAs of one
#    hardware cluster, one cluster barrier a row, no persistent grid);
# 2. split_tune.py --pkg-cluster --cluster: the package's cluster configs and
#    cluster_split.py's (the experiment it came from), beside the heuristic, in a process of its
#    own (a launch the driver refuses badly cannot spoil the timings after it);
# 3. split_tune.py --wide-sync --word --coop: the wide split with every thread spinning (the
#    package's way), one lane a warp spinning, and no wait at all (wrong values, the bound); the
#    slot-word split (no counters, atomics or fences); coop mode 3. Each config is checked
#    against float64 before it is timed (the err column).
# No carry. Writes $OUT/sync_pytest.log, sync_tune.log, cluster_tune.json, sync_tune.json
# (~8-9 minutes; a 600 s call).
#   [SHAPES=512x131072,...] [CSHAPES=...] [PYTEST_K=...] bash experiments/h200/sync_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD/experiments/kernel_perf
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/sync_tune.log"
timeout "${PYTEST_S:-120}" python3 -m pytest -q -p no:cacheprovider \
  tests/kernel/test_cluster_forward.py ${PYTEST_K:+-k "$PYTEST_K"} > "$OUT/sync_pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/sync_pytest.log"
timeout "${CLUSTER_S:-200}" python3 experiments/kernel_perf/split_tune.py --quick --cluster \
  --pkg-cluster --rounds 3 \
  --shapes "${CSHAPES-512x131072,256x262144,1024x65536,64x1048576,2048x32768}" \
  --json "$OUT/cluster_tune.json" 2>&1 | grep -v -i warn | tee -a "$OUT/sync_tune.log"
# Step 3 only with the time left of a TOTAL_S-second call (default 540).
left=$(( ${TOTAL_S:-540} - SECONDS - 10 ))
[ "$left" -gt 60 ] || { echo "no time left for step 3 ($left s)"; exit 0; }
timeout "$left" python3 experiments/kernel_perf/split_tune.py --quick --wide-sync --word \
  --coop --rounds 3 --shapes "${SHAPES-512x131072,1024x65536}" \
  --json "$OUT/sync_tune.json" 2>&1 | grep -v -i warn | tee -a "$OUT/sync_tune.log"

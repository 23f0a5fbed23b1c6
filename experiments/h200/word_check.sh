#!/usr/bin/env bash
# The wait's cost in the split-row forward (39th session, experiments only): the GPU tests of
# wide_split.py's kernels (the wide split with either wait, the slot-word split), then
# split_tune.py --wide-sync --word --coop: the wide split with every thread spinning (the
# package's way), one lane a warp spinning, and no wait at all (wrong values, the bound), and the
# slot-word split (no counters, atomics or fences), beside the heuristic and coop mode 3. No
# carry. Writes $OUT/word_pytest.log, word_tune.log, word_tune.json (~4 minutes).
#   [SHAPES=512x131072,...] bash experiments/h200/word_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD/experiments/kernel_perf
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/word_tune.log"
timeout "${PYTEST_S:-90}" python3 -m pytest -q -p no:cacheprovider \
  tests/kernel/test_experiment_wide_split.py > "$OUT/word_pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/word_pytest.log"
timeout "${TUNE_S:-200}" python3 experiments/kernel_perf/split_tune.py --quick --wide-sync --word \
  --coop --rounds 3 --shapes "${SHAPES-512x131072,256x262144,64x1048576,1024x65536}" \
  --json "$OUT/word_tune.json" 2>&1 | grep -v -i warn | tee -a "$OUT/word_tune.log"

#!/usr/bin/env bash
# Host-path check in one device call (twenty-second session): same-process host A/B against a
# copy of an earlier commit in ab_old/src (git archive HEAD src/rmsnorm_kernel | tar -x -C ab_old),
# the launch split, the shared host probe, and the GPU tests of the launch path. Carry .whl.
#   bash experiments/h200/host_check.sh   (writes under $OUT)
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
timeout 90 python3 experiments/kernel_perf/host_ab.py --old ab_old/src --rounds 15 --calls 1000 --json $OUT/host_ab.json > $OUT/host_ab.log 2>&1; echo "host_ab rc=$?"; tail -8 $OUT/host_ab.log
timeout 60 python3 experiments/kernel_perf/launch_cost.py $OUT/launch_cost.json > $OUT/launch_cost.log 2>&1; echo "launch_cost rc=$?"; cat $OUT/launch_cost.log
timeout 60 python3 experiments/llama/probes/host_cost.py > $OUT/host_cost.log 2>&1; echo "host_cost rc=$?"; head -4 $OUT/host_cost.log
HYPOTHESIS_PROFILE=gpu timeout 230 python3 -m pytest -q -p no:cacheprovider -n 8 -rfE tests/kernel/test_launch.py tests/kernel/test_gpu.py tests/kernel/test_backward_columns.py tests/kernel/test_tma_backward.py tests/kernel/test_config_fuzz.py tests/kernel/test_features.py tests/kernel/test_compile.py tests/kernel/test_inference_forward.py > $OUT/pytest.log 2>&1; echo "pytest rc=$?"; tail -5 $OUT/pytest.log

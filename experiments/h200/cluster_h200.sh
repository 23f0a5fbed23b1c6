#!/usr/bin/env bash
# The cluster kernels' H200 owed figures in one call (no carry, ~4 minutes): the cluster
# backward's tests and its plans against the column tiles (bwd_cluster_tune.py, chosen on an
# H100 in the 45th session), then the cluster forward's fp16 register cap (split_tune.py
# --pkg-cluster, chosen on an H100 in the 44th). Writes $OUT/cluster_pytest.log,
# bwd_cluster.{txt,json}, cap_pkg.{txt,json}.
#   bash experiments/h200/cluster_h200.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD/experiments/kernel_perf
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/bwd_cluster.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 4 tests/kernel/test_cluster_backward.py \
  tests/kernel/test_cluster_forward.py tests/kernel/test_config.py > "$OUT/cluster_pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/cluster_pytest.log"
timeout 200 python3 experiments/kernel_perf/bwd_cluster_tune.py --rounds 3 --rep 20 \
  --shapes 2048x32768,1024x32768,8192x32768,2048x24576,1024x65536 \
  --json "$OUT/bwd_cluster.json" 2>&1 | grep -v -i warn | tee -a "$OUT/bwd_cluster.txt"
timeout 120 python3 experiments/kernel_perf/split_tune.py --quick --pkg-cluster --rounds 3 \
  --rep 15 --shapes 512x131072 --json "$OUT/cap_pkg.json" 2>&1 | grep -v -i warn \
  | tee "$OUT/cap_pkg.txt"

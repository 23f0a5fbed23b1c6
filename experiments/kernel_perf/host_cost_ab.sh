#!/usr/bin/env bash
# Host cost A/B of the small-M dweight finish at 128 x 257 fp32 (the shared probe, host_cost.py):
# A = the heuristic (sum launch below SMALL_M rows), B = SMALL_M = 0 (the in-launch tree, one
# backward launch), interleaved A B A B so the slow host's drift hits both. Run from the repo root.
set -u
for run in A B A B; do
  if [ $run = A ]; then
    python3 experiments/kernel_perf/host_cost.py 2>&1 | grep -E "host us/call|/ F.rms_norm" | sed "s/^/A /"
  else
    python3 -c "import rmsnorm_kernel.config as c; c.SMALL_M = 0; import runpy; runpy.run_path('experiments/kernel_perf/host_cost.py', run_name='__main__')" 2>&1 \
      | grep -E "host us/call|/ F.rms_norm" | sed "s/^/B /"
  fi
done

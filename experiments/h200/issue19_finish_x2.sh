#!/usr/bin/env bash
# Issue 19's second call on nvidia-h200-x2 (2026-11-30): the 2048 comparison sweep that
# final_x2.sh's time limit cut at its 10th branch (GPU 1), beside tune.py's small/bwdq parts (GPU 0);
# then Llama under DDP on both GPUs against one (experiments/ddp/llama_x2.sh). Every limit is the
# one final_x2.sh calibrated before any triton branch ran (its limits.env, passed as L2048/L4096).
#   L2048="compare.curve_tolerance=X compare.delta_metric_tolerance=Y" L4096="..." \
#     bash experiments/h200/issue19_finish_x2.sh OUTDIR
set -u
out=${1:?usage: issue19_finish_x2.sh OUTDIR}
mkdir -p "$out" /tmp/o
out=$(cd "$out" && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
(
  CUDA_VISIBLE_DEVICES=1 SCRATCH=/tmp/c2048 SWEEP=experiment=llama_h200_2048 \
    NORMS=hf,torch,liger,triton,triton_fused LIMIT=${LIMIT_C:-290} \
    EXTRA="trainer.precision=bf16-mixed,bf16-true ${L2048:?}" \
    bash experiments/llama/run_h200.sh /tmp/o/llama_h200_2048 > /tmp/o/llama_h200_2048.txt 2>&1
  echo "2048 sweep rc=$?" >> "$out/summary.txt"
) &
(
  CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$PWD/src timeout "${TUNE_S:-270}" python3 \
    experiments/kernel_perf/tune.py --out /tmp/o/tune.json --parts small,bwdq > /tmp/o/tune.log 2>&1
  echo "tune rc=$?" >> "$out/summary.txt"
) &
wait
LIMITS=${L4096:?} LIMIT_X2=${LIMIT_X2:-170} LIMIT_X1=${LIMIT_X1:-100} \
  bash experiments/ddp/llama_x2.sh /tmp/o/ddp > /tmp/o/ddp.txt 2>&1
echo "ddp rc=$?" >> "$out/summary.txt"
cat "$out/summary.txt" /tmp/o/ddp.txt
grep -h -A14 "^group" /tmp/o/llama_h200_2048/train.log | cut -c1-220
grep '^{' /tmp/o/tune.log | cut -c1-200 | tail -40
(cd /tmp/o && tar czf "$out/results.tgz" .)

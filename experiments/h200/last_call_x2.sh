#!/usr/bin/env bash
# One nvidia-h200-x2 call (2026-11-30, third session), both GPUs busy:
#   GPU 1: issue 19's planted wrong norms at hidden 2048 (hf, planted_eps, planted_grad x
#          bf16-mixed/bf16-true), judged by the committed limits (conf/experiment/llama_h200_2048.yaml):
#          both planted branches must FAIL; then issue 16's eager probes at both widths.
#   GPU 0: tune.py part wide (the backward at 4096-16384 columns, previous backward beside it;
#          one-row forward warps), then the GPU run of tests/kernel/test_contract.py.
#   bash experiments/h200/last_call_x2.sh OUTDIR
set -u
out=${1:?usage: last_call_x2.sh OUTDIR}
mkdir -p "$out" /tmp/o
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
(
  export CUDA_VISIBLE_DEVICES=1
  SCRATCH=/tmp/planted SWEEP=experiment=llama_h200_2048 NORMS=hf,planted_eps,planted_grad \
    EXTRA=trainer.precision=bf16-mixed,bf16-true ENTRY=tests/experiment/planted_train.py \
    LIMIT=${LIMIT_P:-170} bash experiments/llama/run_h200.sh /tmp/o/planted_2048 > /tmp/o/planted.txt 2>&1
  echo "planted_2048 rc=$? (1 expected: the planted branches fail)" >> /tmp/o/summary.txt
  for w in "4096 4 2 4096" "2048 8 8 2048"; do
    set -- $w
    PYTHONPATH=/tmp/site:$PWD/src timeout 110 python3 experiments/llama/probes/llama_patch_step.py \
      "$@" 3 > "/tmp/o/eager_$1.log" 2>&1
    echo "eager_$1 rc=$?" >> /tmp/o/summary.txt
  done
) &
(
  export CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$PWD/src
  timeout "${TUNE_S:-200}" python3 experiments/kernel_perf/tune.py --out /tmp/o/tune_wide.json \
    --parts wide > /tmp/o/tune_wide.log 2>&1
  echo "tune wide rc=$?" >> /tmp/o/summary.txt
  HYPOTHESIS_PROFILE=gpu timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernel/test_contract.py \
    > /tmp/o/pytest_contract.log 2>&1
  echo "pytest contract rc=$?" >> /tmp/o/summary.txt
) &
wait
cat /tmp/o/summary.txt
grep -h -E "LM PASSED|LM FAILED|^PASSED|^FAILED" /tmp/o/planted_2048/train.log | cut -c1-600
grep -h -A12 "^group" /tmp/o/planted_2048/train.log | cut -c1-200
tail -3 /tmp/o/pytest_contract.log
tail -12 /tmp/o/eager_4096.log /tmp/o/eager_2048.log
grep '^{' /tmp/o/tune_wide.log | cut -c1-230
(cd /tmp/o && tar czf "$out/results.tgz" .)

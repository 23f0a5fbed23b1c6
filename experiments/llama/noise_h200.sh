#!/usr/bin/env bash
# Issue 19, step 1 on the H200: the noise floor of the LM criterion, before any triton branch.
#   bash experiments/llama/noise_h200.sh OUTDIR
# a: norm=hf,torch; b: norm=hf again (same seed, data and weights; deterministic: false), per
# experiment x precision (SETTINGS, PRECISIONS); then the planted wrong norms (PLANTED: hf,
# planted_eps, planted_grad at PLANTED_SETTING) and experiments/llama/noise_floor.py, which
# writes noise_floor.json: floors, the 2 x floor limits, and the planted branches judged by them.
set -u
out=${1:?usage: noise_h200.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
settings=${SETTINGS:-experiment=llama_h200,llama_h200_2048}
precisions=${PRECISIONS:-trainer.precision=bf16-mixed,bf16-true}
planted=${PLANTED_SETTING:-experiment=llama_h200}
export KEEP=1
SCRATCH=/tmp/noise/a SWEEP=$settings NORMS=hf,torch EXTRA=$precisions LIMIT=${LIMIT_A:-300} \
  bash experiments/llama/run_h200.sh "$out/a"
SCRATCH=/tmp/noise/b SWEEP=$settings NORMS=hf EXTRA=$precisions LIMIT=${LIMIT_B:-150} \
  bash experiments/llama/run_h200.sh "$out/b"
SCRATCH=/tmp/noise/planted SWEEP=$planted NORMS=hf,planted_eps,planted_grad EXTRA=$precisions \
  ENTRY=tests/experiment/planted_train.py LIMIT=${LIMIT_P:-200} \
  bash experiments/llama/run_h200.sh "$out/planted"
PYTHONPATH=/tmp/site:$PWD/src python3 experiments/llama/noise_floor.py --a /tmp/noise/a/sweep \
  --b /tmp/noise/b/sweep --check /tmp/noise/planted/sweep --out "$out/noise_floor.json" \
  | tee "$out/noise_floor.txt"

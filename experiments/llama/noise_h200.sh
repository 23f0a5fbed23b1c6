#!/usr/bin/env bash
# Issue 19, step 1 on the H200: the noise floor of the LM criterion, before any triton branch.
#   bash experiments/llama/noise_h200.sh OUTDIR
# REPEATS (default 3) sweeps of norm=hf,torch (same seed, data and weights; deterministic: false)
# per experiment x precision (SETTINGS, PRECISIONS); then, unless PLANTED_SETTING=skip, the
# planted wrong norms (hf, planted_eps, planted_grad at PLANTED_SETTING) and
# experiments/llama/noise_floor.py, which writes noise_floor.json: floors over every hf/hf and
# torch/hf pair, the 2 x floor limits, and the planted branches judged by them.
# (2026-11-30's first calibration used 2 sweeps, one with torch: its single torch sample
# under-estimated the floor at 2048 bf16-mixed; see experiments/llama/README.md.)
set -u
out=${1:?usage: noise_h200.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
settings=${SETTINGS:-experiment=llama_h200,llama_h200_2048}
precisions=${PRECISIONS:-trainer.precision=bf16-mixed,bf16-true}
planted=${PLANTED_SETTING:-experiment=llama_h200}
export KEEP=1
sweeps=()
for i in $(seq 1 "${REPEATS:-3}"); do
  SCRATCH=/tmp/noise/r$i SWEEP=$settings NORMS=hf,torch EXTRA=$precisions LIMIT=${LIMIT_R:-200} \
    bash experiments/llama/run_h200.sh "$out/r$i"
  sweeps+=("/tmp/noise/r$i/sweep")
done
check=()
if [ "$planted" != skip ]; then
  SCRATCH=/tmp/noise/planted SWEEP=$planted NORMS=hf,planted_eps,planted_grad EXTRA=$precisions \
    ENTRY=tests/experiment/planted_train.py LIMIT=${LIMIT_P:-200} \
    bash experiments/llama/run_h200.sh "$out/planted"
  check=(--check /tmp/noise/planted/sweep)
fi
PYTHONPATH=/tmp/site:$PWD/src python3 experiments/llama/noise_floor.py --sweeps "${sweeps[@]}" \
  "${check[@]}" --out "$out/noise_floor.json" | tee "$out/noise_floor.txt"

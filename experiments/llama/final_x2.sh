#!/usr/bin/env bash
# Issue 19 on nvidia-h200-x2, one call: per width, on its own GPU (GPU 0: experiment=llama_h200,
# GPU 1: llama_h200_2048), first the noise floor and only then the comparison:
#   1. REPEATS (3) sweeps of norm=hf,torch x trainer.precision=bf16-mixed,bf16-true
#      (noise_h200.sh's calibration, without the planted branches: they were judged on 2026-11-30);
#   2. noise_floor.py: floors over every hf/hf and torch/hf pair, limit = 2 x floor;
#      curve_tolerance / delta_metric_tolerance = the larger limit over both precisions
#      (conf/compare/lm.yaml's rule), written to limits.env BEFORE any triton/liger branch runs;
#   3. the comparison sweep, norm=hf,torch,liger,triton,triton_fused x both precisions, judged by
#      those limits (passed on the command line; the runs' saved configs record them).
#   bash experiments/llama/final_x2.sh OUTDIR
# OUTDIR gets one tarball per width (noise floors, the sweep's lm_comparison.json, logs) and
# summary.txt. The two widths run side by side: tokens/s ratios are within one sweep, where every
# branch shared the host with the other GPU's job alike.
set -u
out=${1:?usage: final_x2.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
if ls .whl/*.whl > /dev/null 2>&1 && ! "$py" -c "import hydra, tbparse" 2> /dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
precisions=${PRECISIONS:-trainer.precision=bf16-mixed,bf16-true}
exp0=${EXP0:-llama_h200}; exp1=${EXP1:-llama_h200_2048}

width() {  # width GPU EXPERIMENT: calibrate, then compare, into $out/EXPERIMENT
  local gpu=$1 exp=$2 w=$out/$2 t0=$SECONDS
  mkdir -p "$w"
  export CUDA_VISIBLE_DEVICES=$gpu KEEP=1
  local sweeps=()
  for i in $(seq 1 "${REPEATS:-3}"); do
    SCRATCH=/tmp/n_$exp/r$i SWEEP=experiment=$exp NORMS=hf,torch EXTRA=$precisions \
      LIMIT=${LIMIT_R:-150} bash experiments/llama/run_h200.sh "$w/noise_r$i" > "$w/noise_r$i.txt" 2>&1
    sweeps+=("/tmp/n_$exp/r$i/sweep")
  done
  PYTHONPATH=/tmp/site:$PWD/src "$py" experiments/llama/noise_floor.py --sweeps "${sweeps[@]}" \
    --out "$w/noise_floor.json" > "$w/noise_floor.txt" 2>&1 || { cat "$w/noise_floor.txt"; return 1; }
  "$py" - "$w/noise_floor.json" > "$w/limits.env" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["settings"]
curve = max(r["limit"]["curve"] for r in rows)
metric = max(r["limit"]["metric"] for r in rows)
print(f"compare.curve_tolerance={curve:.4g} compare.delta_metric_tolerance={metric:.4g}")
PY
  [ -s "$w/limits.env" ] || { echo "$exp: no limits, no comparison" | tee -a "$out/summary.txt"; return 1; }
  echo "$exp noise wall=$((SECONDS - t0))s limits: $(cat "$w/limits.env")" | tee -a "$out/summary.txt"
  SCRATCH=/tmp/c_$exp SWEEP=experiment=$exp NORMS=${NORMS_C:-hf,torch,liger,triton,triton_fused} \
    EXTRA="$precisions $(cat "$w/limits.env")" LIMIT=${LIMIT_C:-260} \
    bash experiments/llama/run_h200.sh "$w/sweep" > "$w/sweep.txt" 2>&1
  echo "$exp sweep rc=$? total wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
  grep -h -E "PASSED|FAILED" "$w/sweep/train.log" | cut -c1-300 | tee -a "$out/summary.txt"
  (cd "$out" && tar czf "$exp.tgz" "$exp")
}

width 0 "$exp0" &
width 1 "$exp1" &
wait
cat "$out"/*/noise_floor.txt
for e in "$exp0" "$exp1"; do grep -A14 "^group" "$out/$e/sweep/train.log" | cut -c1-220; done
rm -rf "${out:?}/$exp0" "${out:?}/$exp1"

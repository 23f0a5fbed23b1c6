#!/usr/bin/env bash
# Issue 19, part 4: Llama (experiment=llama_h200, bf16-mixed) on 2 GPUs against 1, hf and triton.
#   bash experiments/ddp/llama_x2.sh OUTDIR          (on a host with 2 GPUs: nvidia-h200-x2)
# 2 processes x 1 sequence train on the same rows per step as 1 x 2 (dataset.batch_size is per
# process), so the loss curves must agree within the LM criterion calibrated on noise
# (conf/experiment/llama_h200.yaml, compare.equivalence). Writes OUTDIR/llama_ddp_x2.json
# (`rmsnorm-cli equivalence`), each sweep's lm_comparison.json (tokens/s over both GPUs, peak
# memory of GPU 0) and the logs. CHECK_BF16_TRUE=1 adds a one-GPU bf16-true hf/triton sweep at
# experiment=llama_h200_2048 (the float32 probe under bf16 weights). LIMITS holds compare
# overrides for every sweep and the verdict (e.g. the limits of experiments/llama/final_x2.sh's
# calibration: "compare.curve_tolerance=X compare.delta_metric_tolerance=Y").
set -u
out=${1:?usage: llama_x2.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
py=${PYTHON:-python3}
if ls .whl/*.whl > /dev/null 2>&1 && ! "$py" -c "import hydra, tbparse" 2> /dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader > "$out/env.txt" 2>&1
scratch=${SCRATCH:-/tmp/llama_ddp}
rm -rf "$scratch"
run() {  # run NAME LIMIT OVERRIDES...: one sweep into $scratch/NAME, its verdict files to $out/NAME
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  timeout "$limit" "$py" -m rmsnorm_kernel.train --multirun "$@" \
    "hydra.sweep.dir=$scratch/$name" > "$out/$name.log" 2>&1
  echo "$name rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
  mkdir -p "$out/$name"
  cp "$scratch/$name"/*.json "$scratch/$name"/*.png "$out/$name/" 2> /dev/null
  grep -A6 "^group" "$out/$name.log" | cut -c1-200
}
# dataset.n_test=2: every rank needs a test sequence (llama_h200 has 1); both runs test on the same 2.
run x2 ${LIMIT_X2:-200} experiment=llama_h200 norm=hf,triton trainer=ddp trainer.devices=2 \
  dataset.batch_size=1 dataset.n_test=2 ${LIMITS:-}
run x1 ${LIMIT_X1:-120} experiment=llama_h200 norm=hf,triton dataset.n_test=2 ${LIMITS:-}
"$py" -m rmsnorm_kernel.cli equivalence "$scratch/x2" "$scratch/x1" experiment=llama_h200 ${LIMITS:-} \
  --out "$out/llama_ddp_x2.json" 2>&1 | tee "$out/equivalence.txt"
if [ -n "${CHECK_BF16_TRUE:-}" ]; then
  CUDA_VISIBLE_DEVICES=0 run bf16_true ${LIMIT_BT:-100} experiment=llama_h200_2048 \
    trainer.precision=bf16-true norm=hf,triton
  grep -E "PASSED|FAILED" "$out/bf16_true.log" | cut -c1-400
fi
rm -rf "$scratch"

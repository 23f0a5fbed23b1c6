#!/usr/bin/env bash
# One call on a 2 x H200 machine: the Llama comparison at both widths, one width per GPU at the
# same time (speed and memory per branch), then the DDP equivalence of the main job on 2 GPUs
# against 1 (`python -m rmsnorm_kernel.cli equivalence`, run by ../ddp/run_h200x2.sh). Everything
# it writes is packed into OUT/final.tgz (a call returns at most 8 files).
#   bash experiments/h200/final_x2.sh "$OUT" [LLAMA_S DDP_S]
# The Llama runs switch the safetensors export off: at LLM width it is a 3 GB file per branch whose
# write and bitwise reload took most of a run's two minutes in the previous call; the export and its
# reload are exercised by the CPU runs and the tests.
set -u
out=${1:?usage: final_x2.sh OUTDIR}
llama_s=${2:-240}; ddp_s=${3:-170}
work=$(mktemp -d)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$work/env.txt"
t0=$SECONDS
for spec in "0 llama_h200" "1 llama_h200_2048"; do
  set -- $spec
  CUDA_VISIBLE_DEVICES=$1 LIMIT=$llama_s SWEEP=experiment=$2 NORMS=${LLAMA_NORMS:-hf,triton,torch,liger} \
    SCRATCH=/tmp/scratch_$2 EXTRA="callbacks.safetensors_checkpoint=null" \
    bash experiments/llama/run_h200.sh "$work/$2" > "$work/$2.log" 2>&1 &
done
wait
echo "llama both widths wall=$((SECONDS - t0))s" | tee -a "$work/summary.txt"
for w in llama_h200 llama_h200_2048; do
  echo "== $w" | tee -a "$work/summary.txt"
  cat "$work/$w/summary.txt" 2>/dev/null | head -2 | tee -a "$work/summary.txt"
  grep -A12 "tokens/s" "$work/$w.log" | head -14 | tee -a "$work/summary.txt"
done
t0=$SECONDS
LLAMA_SWEEP=skip timeout "$ddp_s" bash experiments/ddp/run_h200x2.sh "$work/ddp" > "$work/ddp.log" 2>&1
echo "ddp rc=$? wall=$((SECONDS - t0))s" | tee -a "$work/summary.txt"
cat "$work/ddp/summary.md" 2>/dev/null | tee -a "$work/summary.txt" | head -40
cp "$work/summary.txt" "$out/summary.txt"
tar czf "$out/final.tgz" -C "$work" .

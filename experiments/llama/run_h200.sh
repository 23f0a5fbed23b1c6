#!/usr/bin/env bash
# The Llama comparison on a GPU: two LLM widths (experiment=llama_h200: hidden 4096 x 4 layers,
# 2 x 4096 tokens; llama_h200_2048: hidden 2048 x 8 layers, 8 x 2048 tokens), each trained 30
# steps in bf16-mixed with every norm branch: hf (LlamaRMSNorm), triton (our patch),
# triton_fused (the patch with fuse_residual=True), torch (nn.RMSNorm) and liger (when
# importable). About 5 minutes on an H200 (estimated: not yet run there).
#
# Run from the repo root with a python3 that has torch, triton, lightning, transformers,
# safetensors, tensorboard, matplotlib; wheels of what it lacks (hydra-core, omegaconf,
# antlr4-python3-runtime, tbparse, liger-kernel) may be put in .whl/: installed to /tmp/site when
# hydra or tbparse is missing.
#   bash experiments/llama/run_h200.sh OUTDIR
# OUTDIR receives the small results (comparison.json, lm_comparison.json, loss_curves.png, each
# run's metrics.json and TensorBoard events, train.log). At these widths neither a Lightning
# checkpoint nor the safetensors export is written by default (callbacks=lm_fast, checkpointing
# off: issue 19's fast runs); with EXTRA=callbacks=lm the exported weights (GBs) go to $SCRATCH
# (default /tmp/llama_h200) and are deleted at the end, after their reload check ran.
# SWEEP replaces the experiment choice (SWEEP=experiment=llama runs the tiny CPU model instead);
# NORMS fixes the branches; TRAIN_ARGS goes before the overrides (e.g. --config-path DIR); EXTRA
# holds more overrides (e.g. callbacks.safetensors_checkpoint=null); ENTRY replaces
# `-m rmsnorm_kernel.train` (tests/experiment/planted_train.py adds the planted wrong norms);
# KEEP=1 keeps $SCRATCH (the sweep, for experiments/llama/noise_floor.py).
set -u
out=${1:?usage: run_h200.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
scratch=${SCRATCH:-/tmp/llama_h200}
sweep=${SWEEP:-experiment=llama_h200,llama_h200_2048}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
py=${PYTHON:-python3}
if ls .whl/*.whl > /dev/null 2>&1 && ! "$py" -c "import hydra, tbparse" 2> /dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
    || echo "no nvidia-smi"
  "$py" - <<'PY'
import importlib
for name in ("torch", "triton", "transformers", "lightning", "hydra", "liger_kernel"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except ImportError as e:
        print(name, "not installed:", e)
PY
} 2>&1 | tee "$out/env.txt"

norms=${NORMS:-hf,triton,triton_fused,torch}
if [ -z "${NORMS:-}" ]; then
  if "$py" -c "import liger_kernel" 2> /dev/null; then
    norms="$norms,liger"
  else
    echo "liger-kernel is not importable: norm=liger SKIPPED (pip install liger-kernel to add it)" \
      | tee -a "$out/env.txt"
  fi
fi

rm -rf "$scratch" && mkdir -p "$scratch"
t0=$SECONDS
timeout "${LIMIT:-560}" "$py" ${ENTRY:--m rmsnorm_kernel.train} ${TRAIN_ARGS:-} --multirun "$sweep" "norm=$norms" \
  "paths.checkpoint_dir=$scratch/checkpoints" "hydra.sweep.dir=$scratch/sweep" ${EXTRA:-} \
  > "$out/train.log" 2>&1
rc=$?
echo "train rc=$rc wall=$((SECONDS - t0))s sweep=$sweep norms=$norms" | tee "$out/summary.txt"
grep -v -E "^\s*$" "$out/train.log" | tail -40

# Bring back the small files; the weights and probes stay in $scratch and are removed.
(cd "$scratch/sweep" 2> /dev/null && find . -maxdepth 1 -type f -print0 \
  | xargs -0 -r cp --parents -t "$out" && find . -path '*tensorboard*' -type f -print0 \
  | xargs -0 -r cp --parents -t "$out" && find . \( -name metrics.json -o -name '*.yaml' \) \
  -path './*/*' -type f -print0 | xargs -0 -r cp --parents -t "$out")
ls -la "$scratch/checkpoints" >> "$out/summary.txt" 2>&1
[ -n "${KEEP:-}" ] || rm -rf "$scratch"
exit $rc

#!/usr/bin/env bash
# The real-model probes of the Llama issue in one device call: GPU kernel + integration tests,
# then the shared probes (probes/, copied from ../shared/tools so the figures match the issue's),
# eager at both widths, then (PART=compile) the compiled probes and the step profile; PART=fusion:
# the compile tests, then the Inductor pass on and off (probes/compile_fusion_ab.py) at both widths.
#   PART=eager|compile|fusion bash experiments/llama/probe_h200.sh "$OUT"
set -u
out=${1:?usage: probe_h200.sh OUTDIR}
part=${PART:-eager}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
step() {  # step NAME TIMEOUT CMD...: run, log, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
  tail -${TAIL:-8} "$out/$name.log"
}
if [ "$part" = eager ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/summary.txt"
  TAIL=12 step pytest "${PYTEST_S:-200}" python3 -m pytest -q -p no:cacheprovider -n 8 -rfE \
    tests/kernel/test_views.py tests/kernel/test_llama_rounding.py tests/kernel/test_features.py \
    tests/kernel/test_double_backward.py tests/kernel/test_compile.py \
    tests/integrations/test_transformers_rules.py tests/integrations/test_transformers_fused.py
  step eager_4096 120 python3 experiments/llama/probes/llama_patch_step.py 4096 4 2 4096 3
  step eager_2048 120 python3 experiments/llama/probes/llama_patch_step.py 2048 8 8 2048 3
elif [ "$part" = fusion ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/summary.txt"
  TAIL=12 step pytest "${PYTEST_S:-200}" python3 -m pytest -q -p no:cacheprovider -n 8 -rfE \
    tests/kernel/test_inductor_fusion.py tests/kernel/test_inductor_gemm_sums.py \
    tests/kernel/test_compile.py tests/kernel/test_mixed_residual.py \
    tests/integrations/test_transformers_inductor_fusion.py tests/experiment/test_compile_run.py \
    tests/integrations/test_transformers_rules.py tests/integrations/test_transformers_fused.py \
    tests/integrations/test_transformers_patch.py
  TAIL=12 step fusion_4096 230 python3 experiments/llama/probes/compile_fusion_ab.py 4096 4 2 4096 3 \
    "$out/fusion_4096.json"
  TAIL=12 step fusion_2048 230 python3 experiments/llama/probes/compile_fusion_ab.py 2048 8 8 2048 3 \
    "$out/fusion_2048.json"
else
  step compile_4096 200 python3 experiments/llama/probes/llama_compile_step.py 4096 4 2 4096 2
  step compile_2048 200 python3 experiments/llama/probes/llama_compile_step.py 2048 8 8 2048 2
  TAIL=60 step profile_4096 150 python3 experiments/llama/probes/profile_step.py 4096 4 2 4096 \
    hf ours liger hf+compile ours+compile
fi

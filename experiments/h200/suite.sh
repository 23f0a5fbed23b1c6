#!/usr/bin/env bash
# The whole GPU check in one call: test suite, main job, reload check, seed commands.
# Run from the repo root on a machine whose python3 has torch + triton + lightning (the H200 image);
# wheels for what it lacks (hydra-core, omegaconf, antlr4, tbparse, liger-kernel) in .whl/.
#   bash experiments/h200/suite.sh "$OUT"
set -u
out=${1:?usage: suite.sh OUTDIR}
logs=$(mktemp -d)
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton, lightning; print('torch', torch.__version__, 'triton', triton.__version__, 'lightning', lightning.__version__)"
} > "$logs/env.txt" 2>&1
cat "$logs/env.txt"
step() {  # step NAME TIMEOUT CMD...: run, log, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall=$((SECONDS - t0))s" | tee -a "$logs/summary.txt"
}
step pytest 330 python3 -m pytest -q -p no:cacheprovider -rfE tests
tail -4 "$logs/pytest.log"
step train 200 python3 -m rmsnorm_kernel.train --multirun norm=reference,triton,torch
tail -14 "$logs/train.log"
step reload_check 60 python3 -m rmsnorm_kernel.experiment.reload
ckpt=$(ls checkpoints/*.safetensors | head -1)
head -c 1000 "$ckpt" > /tmp/truncated.safetensors
step reload_truncated_must_fail 60 python3 -m rmsnorm_kernel.experiment.reload --ckpt /tmp/truncated.safetensors
for cmd in check-environment reference check-forward check-backward check-gamma exercise check-checkpoints plot; do
  step "cli_$cmd" 150 python3 -m rmsnorm_kernel.cli "$cmd"
done
tail -30 "$logs/cli_check-gamma.log"
cp "$logs/summary.txt" "$out/summary.txt"
tar czf "$out/suite.tgz" -C "$logs" . -C "$PWD" outputs
cat "$out/summary.txt"

#!/usr/bin/env bash
# The whole GPU check in one call: test suite (hypothesis GPU profile), main job, reload check and
# every command-set check. Run from the repo root on a machine whose python3 has torch, triton,
# lightning and transformers (the H200 image); wheels for what it lacks (hydra-core, omegaconf,
# antlr4, tbparse, liger-kernel, ...) in .whl/. If .wq1/ was carried (quack's first half), it is
# kept in /root for bench.sh, which must be the very next call (.whl is kept there too).
#   [TESTS='tests/cli tests/kernel/test_gpu.py'] bash experiments/h200/suite.sh "$OUT" [PYTEST_S]
# TESTS picks the test paths (default: every test but tests/packaging).
set -u
out=${1:?usage: suite.sh OUTDIR}
pytest_s=${2:-300}
logs=$(mktemp -d)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
[ -d .wq1 ] && mkdir -p /root/wq1 && cp .wq1/* /root/wq1/
# bench.sh then need not carry .whl (tree + .whl + .wq2 came to 67 MB, over one call's 64 MiB).
mkdir -p /root/whl && cp .whl/*.whl /root/whl/
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton, lightning, transformers, hydra; print('torch', torch.__version__, 'triton', triton.__version__, 'lightning', lightning.__version__, 'transformers', transformers.__version__, 'hydra', hydra.__version__)"
} > "$logs/env.txt" 2>&1
cat "$logs/env.txt"
step() {  # step NAME TIMEOUT CMD...: run, log, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall=$((SECONDS - t0))s" | tee -a "$logs/summary.txt" "$out/summary.txt"
}
# tests/packaging checks the CPU venv that `make setup` builds (lock, wheel, console scripts): not this image.
# shellcheck disable=SC2086  # TESTS is a list of paths
HYPOTHESIS_PROFILE=gpu step pytest "$pytest_s" python3 -m pytest -q -p no:cacheprovider -n 8 -rfE --durations=15 ${TESTS:-tests --ignore=tests/packaging}
cp "$logs/pytest.log" "$out/pytest.log"
grep -E "passed|failed|error" "$logs/pytest.log" | tail -3; grep -E "^(FAILED|ERROR)" "$logs/pytest.log" | head -20
step train 90 python3 -m rmsnorm_kernel.train --multirun norm=reference,triton,torch
tail -12 "$logs/train.log"
step reload_check 30 python3 -m rmsnorm_kernel.experiment.exports.reload
ckpt=$(ls checkpoints/*.safetensors | head -1)
head -c 1000 "$ckpt" > /tmp/truncated.safetensors
step reload_truncated_must_fail 30 python3 -m rmsnorm_kernel.experiment.exports.reload --ckpt /tmp/truncated.safetensors
for cmd in check-environment check-forward check-backward check-weight exercise; do
  step "cli_$cmd" 40 python3 -m rmsnorm_kernel.cli "$cmd"
done
grep -hE "PASS|FAIL|killed|cases" "$logs"/cli_*.log | tail -12
mkdir -p "$out/checks"
cp outputs/checks/*.json outputs/exercise/*.json "$out/checks/" 2>/dev/null
tar czf "$out/suite.tgz" -C "$logs" . -C "$PWD" outputs
cat "$out/summary.txt"

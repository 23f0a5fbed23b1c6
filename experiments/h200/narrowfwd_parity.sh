#!/usr/bin/env bash
# One call: tune.py part narrowfwd (the several-rows forward at 64-256 columns, inference), our
# Liger drop-in beside Liger-Kernel (experiments/peer_parity/liger_parity.py), and the peer-API
# tests on the GPU.
#   bash experiments/h200/narrowfwd_parity.sh "$OUT"   (carry .whl)
set -u
out=${1:?usage: narrowfwd_parity.sh OUTDIR}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
t0=$SECONDS
timeout 240 python3 experiments/kernel_perf/tune.py --parts narrowfwd --out "$out/narrowfwd.json" \
  > "$out/narrowfwd.log" 2>&1
echo "narrowfwd rc=$? wall=$((SECONDS - t0))s"
grep '"again' "$out/narrowfwd.log" | cut -c1-200
t0=$SECONDS
timeout 150 python3 experiments/peer_parity/liger_parity.py --out "$out/liger_parity.json" \
  > "$out/liger_parity.log" 2>&1
echo "parity rc=$? wall=$((SECONDS - t0))s"; tail -3 "$out/liger_parity.log"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/integrations/test_peer_apis.py \
  > "$out/pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$out/pytest.log"

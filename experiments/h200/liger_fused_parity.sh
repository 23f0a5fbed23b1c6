#!/usr/bin/env bash
# One call: our Liger fused-add and modulated drop-ins beside Liger-Kernel's own kernels
# (experiments/peer_parity/liger_fused_parity.py), the plain norm's parity again, and the
# drop-in tests on the GPU.
#   [PYTEST=0] bash experiments/h200/liger_fused_parity.sh "$OUT"   (carry .whl)
# PYTEST=0 skips the tests (suite.sh runs them with the rest).
set -u
out=${1:?usage: liger_fused_parity.sh OUTDIR}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
for script in liger_fused_parity liger_parity; do
  t0=$SECONDS
  timeout 200 python3 "experiments/peer_parity/$script.py" --out "$out/$script.json" \
    > "$out/$script.log" 2>&1
  echo "$script rc=$? wall=$((SECONDS - t0))s"; tail -3 "$out/$script.log"
done
[ "${PYTEST:-1}" = 0 ] && exit 0
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/integrations/test_peer_apis.py \
  tests/integrations/test_liger_fused_add.py tests/integrations/test_liger_modulated.py \
  tests/integrations/test_liger_megatron.py tests/integrations/test_flash_attn_extras.py \
  > "$out/pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$out/pytest.log"

#!/usr/bin/env bash
# One call for a session short of device time: edge_tune.sh, then the GPU tests of the kernel
# layer and the drop-ins (tests/kernel, tests/integrations; PYTEST_S seconds at most). Carry .whl
# (and .wq1, for bench.sh straight after, as suite.sh):
#   [TESTS="tests/kernel/test_views.py ..."] bash experiments/h200/tests_then_tune.sh "$OUT" [PYTEST_S]
# $OUT gets summary.txt, pytest.log and edge_tune.sh's three logs.
set -u
out=${1:?usage: tests_then_tune.sh OUTDIR [PYTEST_S]}
pytest_s=${2:-270}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
# As suite.sh: keep quack's first half (.wq1, if carried) and .whl for bench.sh, the next call.
[ -d .wq1 ] && mkdir -p /root/wq1 && cp .wq1/* /root/wq1/
mkdir -p /root/whl && cp .whl/*.whl /root/whl/
# The tune first (~2 minutes): its logs land in $OUT line by line, so they come back even if the
# tests then run into the call's limit.
EDGE_JSON=/tmp/edge bash experiments/h200/edge_tune.sh "$out"
t0=$SECONDS
# shellcheck disable=SC2086  # TESTS is a list of paths
HYPOTHESIS_PROFILE=gpu PYTHONPATH=/tmp/site:$PWD/src timeout "$pytest_s" python3 -m pytest -q \
  -p no:cacheprovider -n 8 -rfE --durations=10 ${TESTS:-tests/kernel tests/integrations} \
  > "$out/pytest.log" 2>&1
echo "pytest rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
grep -E "passed|failed|error" "$out/pytest.log" | tail -2; grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -20

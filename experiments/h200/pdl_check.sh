#!/usr/bin/env bash
# One call for programmatic dependent launch (config.PDL) and the sum launch's strips: the
# measurement (experiments/kernel_perf/pdl.py) and the GPU tests of the launch paths.
#   bash experiments/h200/pdl_check.sh "$OUT" [SHAPES ROUNDS PYTEST_FILES...]
# (carry .whl). Defaults: every shape of pdl.py, 3 rounds, the launch-path test files.
set -u
out=${1:?usage: pdl_check.sh OUTDIR [SHAPES ROUNDS TESTS...]}
shapes=${2:-5}
rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=(tests/kernel/test_pdl.py tests/kernel/test_launch.py
  tests/kernel/test_gpu.py tests/kernel/test_backward_columns.py tests/kernel/test_tma_backward.py
  tests/kernel/test_config_fuzz.py tests/kernel/test_features.py tests/kernel/test_compile.py
  tests/kernel/test_inference_forward.py tests/kernel/test_config.py
  tests/kernel/test_forward_variants.py tests/kernel/test_clusters.py)
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
timeout 90 python3 experiments/kernel_perf/pdl.py --out "$out/pdl.json" --shapes "$shapes" \
  --rounds "$rounds" > "$out/pdl.log" 2>&1
echo "pdl.py rc=$?"
grep -v "round [12]" "$out/pdl.log" | grep -v "sum G" | tail -60
HYPOTHESIS_PROFILE=gpu timeout 110 python3 -m pytest -q -p no:cacheprovider -n 8 -rfE \
  "${tests[@]}" > "$out/pytest.log" 2>&1
echo "pytest rc=$?"
tail -5 "$out/pytest.log"; grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -20

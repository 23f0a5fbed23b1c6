#!/usr/bin/env bash
# PyTorch's own generic tests for nn.RMSNorm / F.rms_norm, with rmsnorm_kernel's drop-ins swapped
# into module_db / op_db (swap_conftest.py), beside a baseline run of PyTorch's own.
#
#   bash run.sh TESTS_DIR OUT [PYTHON]
#
# TESTS_DIR: a folder holding PyTorch's test/test_modules.py, test_ops.py, test_ops_gradients.py
# and test_ops_fwd_gradients.py (the versions used are named in README.md; they are PyTorch's
# files, not copied here). torch.testing._internal needs `expecttest` importable. Writes
# OUT/{torch,ours}/<file>.{log,xml} and OUT/summary.txt (ours against torch's, test by test).
set -u
TESTS=$(cd "$1" && pwd); OUT=$(mkdir -p "$2" && cd "$2" && pwd); PY=${3:-python}
cp "$(dirname "$0")/swap_conftest.py" "$TESTS/conftest.py"
for mode in torch ours; do
  swap=1; [ "$mode" = torch ] && swap=0
  mkdir -p "$OUT/$mode"
  for spec in test_modules.py:RMSNorm test_ops.py:rms_norm test_ops_gradients.py:rms_norm \
      test_ops_fwd_gradients.py:rms_norm; do
    f=${spec%%:*}; k=${spec##*:}
    (cd "$TESTS" && RMSNORM_SWAP=$swap "$PY" -m pytest -q -rA "$f" -k "$k" -p no:cacheprovider \
      --junitxml="$OUT/$mode/${f%.py}.xml" > "$OUT/$mode/${f%.py}.log" 2>&1)
    echo "$mode $f: $(tail -1 "$OUT/$mode/${f%.py}.log")"
  done
done
"$PY" - "$OUT" > "$OUT/summary.txt" <<'PYEOF'
import collections, sys, xml.etree.ElementTree as ET
out = sys.argv[1]
def load(mode, name):
    result = {}
    for case in ET.parse(f"{out}/{mode}/{name}.xml").getroot().iter("testcase"):
        state = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            state = "failed"
        elif case.find("skipped") is not None:
            state = "skipped"
        result[case.get("classname") + "::" + case.get("name")] = state
    return result
for name in ("test_modules", "test_ops", "test_ops_gradients", "test_ops_fwd_gradients"):
    theirs, ours = load("torch", name), load("ours", name)
    print(name, "torch:", dict(collections.Counter(theirs.values())),
          "ours:", dict(collections.Counter(ours.values())))
    for test in sorted(ours):
        if ours[test] != theirs.get(test):
            print("   ", theirs.get(test), "->", ours[test], test)
PYEOF
cat "$OUT/summary.txt"

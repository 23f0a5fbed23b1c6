#!/usr/bin/env bash
# One device call (fourteenth session): tune.py parts hints, packed and earlyw (liger from .whl), with
# Inductor's cache under $OUT so that the compile peer's generated kernels and the configs its
# autotuner picked come back (inductor/: the kernel sources and *.best_config).
#   bash experiments/kernel_perf/hints_h200.sh "$OUT" [PARTS] [TUNE_S]
set -u
out=${1:?usage: hints_h200.sh OUTDIR [PARTS] [TUNE_S]}
parts=${2:-hints,packed,earlyw}; tune_s=${3:-420}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/liger*.whl \
  && export PYTHONPATH=$PYTHONPATH:/tmp/site
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_cache
t0=$SECONDS
timeout "$tune_s" python3 experiments/kernel_perf/tune.py --out "$out/tune.json" --parts "$parts" \
  > "$out/tune.log" 2>&1
echo "tune $parts rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
mkdir -p "$out/inductor"
# The generated Triton kernels (their source names the reduction and its launch heuristics) and
# the autotuner's picks beside them.
grep -rl --include=*.py "triton_heuristics" /tmp/inductor_cache 2>/dev/null | head -40 \
  | while read -r f; do cp "$f" "$out/inductor/$(basename "$(dirname "$f")")_$(basename "$f")"; done
find /tmp/inductor_cache -name "*.best_config" 2>/dev/null | head -40 \
  | while read -r f; do cp "$f" "$out/inductor/"; done
ls "$out/inductor" | wc -l | sed 's/^/inductor files: /' | tee -a "$out/summary.txt"
grep -v '^{' "$out/tune.log" | tail -20

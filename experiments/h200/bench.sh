#!/usr/bin/env bash
# Benchmark against every peer (quack included), then the Llama comparison. quack's cu13 library
# wheel (92 MB) exceeds what one device call carries: suite.sh (the previous call) left its first
# half in /root/wq1 (and .whl in /root/whl); this call brings the second half and the small
# cutlass wheels in .wq2/ (carry .wq2 alone: with .whl as well the call is over 64 MiB).
#   bash experiments/h200/bench.sh "$OUT" [BENCH_S LLAMA_S]
# AFTER=probes runs the shared eager probes at both widths (Liger beside us) after the benchmark
# instead of the Llama experiment sweep (AFTER=llama, the default), and with COMPILED=1 the compiled
# probes too (3 rounds each); AFTER=none: the bench only. T39=1 runs everything under
# the carried Triton 3.9 (thread-block clusters), staged by stage.sh in /root/t39a and /root/t39b.
set -u
out=${1:?usage: bench.sh OUTDIR}
bench_s=${2:-450}; llama_s=${3:-200}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
wheels=/tmp/wheels && mkdir -p $wheels
cu13x=0  # the repacked halves (wheels.sh): unpacked into the site after the wheels are installed
if [ -f /root/wq1/cu13x.part.aa ] && [ -f .wq2/cu13x.part.ab ]; then
  cu13x=1 && cp .wq2/*.whl $wheels/
elif [ -f /root/wq1/cu13.part.aa ] && [ -f .wq2/cu13.part.ab ]; then  # the wheel itself, halved
  cat /root/wq1/cu13.part.aa .wq2/cu13.part.ab \
    > $wheels/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
  cp .wq2/*.whl $wheels/
else
  echo "quack's libraries missing (/root/wq1 or .wq2): quack will show as not installed"
fi
# .whl here, or the copy suite.sh (the previous call) kept: carry only .wq2 with this call.
if [ -d .whl ]; then cp .whl/*.whl $wheels/; elif [ -d /root/whl ]; then cp /root/whl/*.whl $wheels/
else echo "no .whl here nor in /root/whl: carry .whl, or run suite.sh just before"; exit 1; fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $wheels/*.whl || exit 1
if [ $cu13x = 1 ]; then
  cat /root/wq1/cu13x.part.aa .wq2/cu13x.part.ab | xz -d | tar x -C /tmp/site || exit 1
fi
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD/src
if [ "${T39:-0}" = 1 ]; then
  source experiments/kernel_perf/triton39.sh
  use_triton39 /root/t39a/t39part.00 /root/t39b/t39part.01 >> "$out/summary.txt" || exit 1
  tail -1 "$out/summary.txt"  # (not piped: use_triton39 exports into this shell)
fi
python3 -c "import quack, liger_kernel; print('quack and liger import')"
t0=$SECONDS
# BENCH_ARGS: more Hydra overrides, e.g. BENCH_ARGS='benchmark.modes=[graph,graph_cold,end_to_end]'
timeout "$bench_s" python3 -m rmsnorm_kernel.cli bench "benchmark.out_dir=$out/bench" ${BENCH_ARGS:-} \
  > "$out/bench.log" 2>&1
echo "bench rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
tail -80 "$out/bench.log"
[ "${AFTER:-llama}" = none ] && exit 0
if [ "${AFTER:-llama}" = probes ]; then
  probes() {  # probes KIND SCRIPT LIMIT TAIL: the shared probe at both widths, 3 rounds
    local kind=$1 script=$2 limit=$3 tail=$4 w t0
    for w in "4096 4 2 4096" "2048 8 8 2048"; do
      set -- $w
      t0=$SECONDS
      timeout "$limit" python3 "experiments/llama/probes/$script" $1 $2 $3 $4 3 \
        > "$out/${kind}_$1.log" 2>&1
      echo "${kind}_$1 rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
      tail -"$tail" "$out/${kind}_$1.log"
    done
  }
  probes eager llama_patch_step.py 130 8
  [ "${COMPILED:-0}" = 1 ] && probes compile llama_compile_step.py 150 7
  exit 0
fi
t0=$SECONDS
LIMIT=$llama_s SWEEP=${LLAMA_SWEEP:-experiment=llama_h200} bash experiments/llama/run_h200.sh "$out/llama" > "$out/llama.log" 2>&1
echo "llama rc=$? wall=$((SECONDS - t0))s" | tee -a "$out/summary.txt"
tail -30 "$out/llama.log"

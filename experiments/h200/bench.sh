#!/usr/bin/env bash
# Benchmarks against every peer, quack included. quack's cu13 library wheel (92 MB) exceeds what one
# device call carries: the previous call left its first half in /root (.wq1/cu13.part.aa), this
# call brings the second (.wq2/cu13.part.ab).
#   bash experiments/h200/bench.sh "$OUT"
set -u
out=${1:?usage: bench.sh OUTDIR}
export PYTHONUNBUFFERED=1
wheels=/tmp/wheels && mkdir -p $wheels
cat /root/cu13.part.aa .wq2/cu13.part.ab > $wheels/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
cp /root/wq1/*.whl .whl/*.whl $wheels/
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD/src
python3 -c "import quack, liger_kernel; print('quack', quack.__version__ if hasattr(quack, '__version__') else '?')"
timeout 280 python3 experiments/kernel_vs_peers/bench.py --out "$out/peers.json" > "$out/peers.log" 2>&1
echo "peers rc=$?"; tail -62 "$out/peers.log"
timeout 200 python3 experiments/kernel_vs_peers/overhead.py > "$out/gpu_time.log" 2>&1
echo "gpu time rc=$?"; grep -E "^---|fwd" "$out/gpu_time.log"
timeout 250 python3 -m rmsnorm_kernel.cli benchmark > "$out/seed_benchmark.log" 2>&1
echo "seed benchmark rc=$?"; tail -40 "$out/seed_benchmark.log"
cp outputs/benchmark/*.json "$out/" 2>/dev/null
ls "$out"

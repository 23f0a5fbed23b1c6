#!/usr/bin/env bash
# Rebuild, on this (networked) machine, the git-ignored wheel folders the device scripts carry:
#   .whl/   what the H200 image lacks: hydra-core, omegaconf, antlr4 (built here: sdist only),
#           tbparse, the Hydra launchers and their deps, liger-kernel        (~2 MB)
#   .wq1/   the first half of nvidia-cutlass-dsl-libs-cu13, repacked as tar.xz (cu13x.part.aa,
#           33 MB): the 92 MB wheel is over one call's 64 MiB, which also counts the working tree
#           (~15 MB)
#   .wq2/   its second half (cu13x.part.ab) and quack-kernels, nvidia-cutlass-dsl + -libs-base/-core,
#           apache-tvm-ffi, torch-c-dlpack-ext (~43 MB)
#   .t39a/ .t39b/  with T39=1: a slimmed Triton 3.9 in two xz parts (../kernel_perf/triton39.sh)
# The image runs CPython 3.12 on x86_64. Versions are the ones every recorded run used.
#   [T39=1] bash experiments/h200/wheels.sh
set -eu
cd "$(dirname "$0")/../.."
py="--python-version 3.12 --platform manylinux_2_28_x86_64 --only-binary=:all: --no-deps"
pip="python3 -m pip"
rm -rf .whl .wq1 .wq2 && mkdir -p .whl .wq1 .wq2
$pip download -q --no-deps -d .whl hydra-core==1.3.8 omegaconf==2.3.1 tbparse==0.0.9 \
  hydra-joblib-launcher==1.2.0 hydra-submitit-launcher==1.2.0 submitit==1.5.4 liger-kernel==0.8.5 \
  joblib==1.6.0 cloudpickle==3.1.3
$pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
# shellcheck disable=SC2086
$pip download -q $py -d .wq2 quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 \
  nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 apache-tvm-ffi \
  torch-c-dlpack-ext
# shellcheck disable=SC2086
$pip download -q $py -d /tmp/cu13 nvidia-cutlass-dsl-libs-cu13==4.8.1
# Repacked: the wheel's files (227 MB) as tar.xz, 66 MB against the zip's 92, in two halves, so
# that each of the two calls carrying one has room beside the tree (bench.sh unpacks it into its
# --target site, which is what installing the wheel there would give).
rm -rf /tmp/cu13/x && mkdir -p /tmp/cu13/x
python3 -m zipfile -e /tmp/cu13/nvidia_cutlass_dsl_libs_cu13-4.8.1-*.whl /tmp/cu13/x
tar c -C /tmp/cu13/x . | xz -6 -T2 > /tmp/cu13/cu13x.tar.xz
split -n 2 /tmp/cu13/cu13x.tar.xz /tmp/cu13/cu13x.part.
mv /tmp/cu13/cu13x.part.aa .wq1/ && mv /tmp/cu13/cu13x.part.ab .wq2/
du -sh .whl .wq1 .wq2 && ls .whl .wq1
[ "${T39:-0}" = 1 ] || exit 0
# The slimmed Triton 3.9 (triton39.sh's header says what is dropped and why it still runs).
tmp=$(mktemp -d)
# shellcheck disable=SC2086
$pip download -q $py -d "$tmp" triton==3.9.0
(cd "$tmp" && python3 -m zipfile -e triton-3.9.0-*.whl unpacked)
rm -rf "$tmp"/unpacked/triton/backends/amd "$tmp"/unpacked/triton/backends/nvidia/bin/ptxas-blackwell \
  "$tmp"/unpacked/triton/backends/nvidia/lib/cupti* "$tmp"/unpacked/triton/_C/libproton.so \
  "$tmp"/unpacked/triton/instrumentation "$tmp"/unpacked/triton/profiler
rm -rf .t39a .t39b && mkdir -p .t39a .t39b
tar c -C "$tmp/unpacked" triton triton-3.9.0.dist-info | xz -6 -T2 | split -b 53000000 -d - "$tmp/t39part."
mv "$tmp/t39part.00" .t39a/ && mv "$tmp/t39part.01" .t39b/
[ ! -e "$tmp/t39part.02" ] || { echo "Triton 3.9 needs a third part: not planned for" >&2; exit 1; }
rm -rf "$tmp"
du -sh .t39a .t39b

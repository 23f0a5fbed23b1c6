# Sourced by device scripts: unpack the slimmed Triton 3.9 (cp312; no AMD backend, Blackwell
# ptxas, CUPTI or proton) from its two parts and put it first on PYTHONPATH.
#   use_triton39 PART00 PART01   (the files of .t39a/ and .t39b/, wherever the calls left them)
# Rebuild the parts: `T39=1 bash experiments/h200/wheels.sh` (about 2 minutes), which does this:
# pip download --no-deps triton==3.9.0 --python-version 3.12
# --only-binary=:all: --platform manylinux_2_28_x86_64; unzip; drop triton/backends/amd,
# nvidia/bin/ptxas-blackwell, nvidia/lib/cupti*, _C/libproton.so, instrumentation, profiler;
# tar c triton triton-3.9.0.dist-info | xz -6; split -b 53000000 -d into .t39a/ and .t39b/.
use_triton39() {
  mkdir -p /tmp/t39 && cat "$1" "$2" | xz -d | tar x -C /tmp/t39 || return 1
  # The slimmed wheel has no AMD backend, but its entry points still name it (and the image's
  # Triton 3.6 metadata names both too): discover the backends in the tree instead.
  export PYTHONPATH=/tmp/t39${PYTHONPATH:+:$PYTHONPATH} TRITON_BACKENDS_IN_TREE=1
  # From 3.9 Triton compiles sm_90 with the ptxas it calls "blackwell" (CUDA 13), dropped from the
  # slimmed wheel: point that name at the bundled CUDA 12.9 ptxas, which knows sm_90a.
  export TRITON_PTXAS_BLACKWELL_PATH=/tmp/t39/triton/backends/nvidia/bin/ptxas
  chmod +x /tmp/t39/triton/backends/nvidia/bin/*  # unzip kept no mode bits
  python3 -c "import triton; print('triton', triton.__version__, triton.__file__)"
}

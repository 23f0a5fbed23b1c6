#!/usr/bin/env bash
# Stage carried folders on the device machine for a later call: each carried `.NAME/` is copied
# to /root/NAME/ (kept while the machine stays warm, ~30 s between calls). For payloads over the
# 64 MiB one call carries: e.g. the Triton 3.9 parts and quack's wheel halves for
#   bash experiments/h200/stage.sh      carry [".t39a"]
#   bash experiments/h200/stage.sh      carry [".t39b"]
#   bash experiments/h200/stage.sh      carry [".wq1"]
#   T39=1 bash experiments/h200/bench.sh "$OUT" 300   carry [".wq2", ".whl"]
set -u
for d in .t39a .t39b .wq1 .wq2; do
  if [ -d "$d" ]; then
    mkdir -p "/root/${d#.}" && cp "$d"/* "/root/${d#.}/" && ls -la "/root/${d#.}"
  fi
done

#!/usr/bin/env bash
# Issue 6 on the H200: every method side by side per preset, results written to $OUT
# as each preset finishes. Usage (device machine): bash bench/step_gpu.sh PRESET[,PRESET...] [extra args]
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-bench/results}
presets=${1:-paper-100m}
shift || true
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader
for p in ${presets//,/ }; do
  python3 -m mhar bench step --preset "$p" --methods baseline,hyper,attnres,mhar,mhar-block \
    --out "$OUT" --tag "$p" "$@" 2>&1 | grep -v "^{" | tee -a "$OUT/step_log.txt"
done

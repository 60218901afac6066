#!/usr/bin/env bash
# Session 64, call 3a: FA4's site only (carry .whl/fa4a), for call 3b on the same warm machine.
# run (carry .whl/fa4a): OUT=$OUT bash bench/results/session64/3_fa4_bars_sdpa_last/a.sh
( source "$(dirname "$0")/../../session63/fa4_site.sh" ) > $OUT/site.log 2>&1; echo "fa4 site rc=$? at ${SECONDS}s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.csv

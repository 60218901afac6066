#!/usr/bin/env bash
# Session 69: paper-1b's attention on FA4 with its 80-lane heads padded to 96 and to 128, against
# cuDNN (width.py). As run (f026710) it went on, on an H200 only, to 350M at 32 x 1024 with FA4
# and cuDNN alternating; an H100 came, so that did not run, and that script is gone.
# run: session 64's a.sh first (carry .whl/fa4a; FA4's site), then on the same warm machine
#   (carry .whl/fa4b): C=<commit> OUT=$OUT bash bench/results/session69/3_fa4_width/b.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
D=$(dirname "$0")
source "$D/../../session63/fa4_site.sh" > $OUT/site.log 2>&1; echo "fa4 site rc=$? at ${SECONDS}s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.csv
timeout 150 python3 $D/width.py > $OUT/width.log 2>&1; echo "width rc=$? at ${SECONDS}s"; grep "^|" $OUT/width.log

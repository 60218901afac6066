#!/usr/bin/env bash
# session 50 call 2: bench/overlap_probe.py (new): do memory-bound adds, as many as routing's
# kernels take a step, hide behind one step's matrix products on a second CUDA stream?
# 350M (routing 18 ms a step), 1B (44 ms), 100M (4.2 ms).
# run: C=<commit> OUT=$OUT bash bench/results/session50/2_overlap_probe/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
for pm in paper-350m:18 paper-1b:44 paper-100m:4.2; do
  p=${pm%%:*}; m=${pm##*:}
  timeout 150 python3 bench/overlap_probe.py --preset $p --mem-ms $m --out $R/overlap_$p.json > $R/overlap_$p.log 2>&1
  echo "$p rc=$?"; tail -n 9 $R/overlap_$p.log
done

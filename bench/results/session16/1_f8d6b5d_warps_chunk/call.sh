#!/usr/bin/env bash
# session 16 call 1: phase 1's product kernels with 16 warps per program (one forward program per SM), and the two-phase chunk of 16 (products over 16 queries) against 8, in the whole step at 1280/73 and 1024/49 with 8 heads
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
P='{"": null, "16 warps": {"dot_warps": 16, "fwd_dot_progs_per_sm": 1}}'
for s in 1280/36 1024/24; do
  n=${s%/*}
  timeout 100 python3 bench/routing.py --step-only --shapes $s --heads 8 --phase1 "$P" --out $R/ws${n}_s8.json > $R/ws${n}_s8.log 2>&1
  grep -h "whole step" $R/ws${n}_s8.log; pack
  timeout 80 python3 bench/routing.py --step-only --shapes $s --heads 8 --chunk 16 --phase1 '{"": null}' --out $R/ws${n}_s16.json > $R/ws${n}_s16.log 2>&1
  grep -h "whole step" $R/ws${n}_s16.log; pack
done
grep -h "^ \+[0-9.]\+ ms" $R/ws1280_s*.log | head -0

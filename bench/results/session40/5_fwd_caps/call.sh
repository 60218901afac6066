#!/usr/bin/env bash
# session 40 call 5: phase 1's forward with a head per program (`_fwd_dot_kernel`, SPLIT),
# whose cap of 160 registers at 1024 spills (ncu, call 3: 1.8 M local-memory requests, at
# 41 sources 509 us, DRAM 68%): other caps and programs per SM, one read as training
# takes it (--direct-rows), at 1024 and 1280.
# run: C=<commit> OUT=$OUT bash bench/results/session40/5_fwd_caps/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session40/5_fwd_caps
for d in 1024 1280; do
  n=$([ $d = 1024 ] && echo 9,25,41 || echo 17,41,65)
  timeout 150 python3 bench/phase1_call.py --direct-rows --d $d --n $n --queries 8 --heads 8 --iters 10 \
    --sweep $D/sweep_$d.json > $R/sweep_$d.md 2>&1; grep "^|" $R/sweep_$d.md | grep -v -- "---"; tail -n 1 $R/sweep_$d.md; pack
done

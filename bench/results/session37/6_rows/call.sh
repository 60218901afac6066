#!/usr/bin/env bash
# session 37 call 6: calls 1-4 timed route_partial's fp32 partial, whose fp32 gradients
# take the gather's and COEF pass's other variants; the 1B step (call 5) showed none of
# their gains. The same sweeps with the rows as training takes them (phase1_call.py
# --direct-rows: bf16 rows, exact gather products, coefficient parts), at 1024 and 1280
# with 8 heads and 1024 with one head.
# run: C=<commit> OUT=$OUT bash bench/results/session37/6_rows/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session37/6_rows
sweep() {  # tag, d, heads, queries, counts, configs, limit
  timeout $7 python3 bench/phase1_call.py --direct-rows --d $2 --n $5 --queries $4 --heads $3 --iters 20 \
    --sweep $6 > $R/sweep_$1.md 2>&1; grep "^|" $R/sweep_$1.md | grep -v -- "---"; pack
}
sweep 1024h8 1024 8 6 4,8,16,41 $D/s1024.json 150
sweep 1280h8 1280 8 8 4,8,16,41,73 $D/s1280.json 150
sweep 1024h1 1024 1 6 4,8,16,41 $D/h1.json 100

#!/usr/bin/env bash
# session 39 call 7: the deferred reads kernel with dw summed per read in the read loop
# ("pending_dw": 2, a select per element of the (reads, d) accumulator) against per tile
# (1, call 5's) and without dw (a diagnostic), and the per-read kernels.
# run: C=<commit> OUT=$OUT bash bench/results/session39/7_deferred_dw_select/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
sw() { echo "\"$1/$2w/$3 dw$4\": {\"pending_elems\": $(( $1 * 1024 )), \"pending_warps\": $2, \"pending_progs_per_sm\": $3, \"pending_dw\": $4}"; }
SW="{$(sw 2 8 2 1), $(sw 4 8 2 0), $(sw 4 8 2 2), $(sw 4 8 1 2), $(sw 2 8 2 2), $(sw 1 8 3 2), $(sw 1 2 8 2), $(sw 2 4 3 2), $(sw 1 4 4 2)}"
echo "$SW" > $R/sweep.json
timeout 300 python3 bench/phase2_deferred.py --d 1024 --heads 8 --tokens 16384 --sites 8 --sweep "$SW" > $R/chunk_1024.md 2>&1
grep -v Warn $R/chunk_1024.md; pack

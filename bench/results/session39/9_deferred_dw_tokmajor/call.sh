#!/usr/bin/env bash
# session 39 call 9: the deferred reads kernel writing r dz out (two bf16 parts) token-major (call 8: 8-byte runs per head and read), and dw as
# one batched product per source over the tokens ("pending_dw": 3), against without dw (a
# diagnostic, 0) and the per-read kernels.
# run: C=<commit> OUT=$OUT bash bench/results/session39/9_deferred_dw_tokmajor/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
sw() { echo "\"$1/$2w/$3 dw$4\": {\"pending_elems\": $(( $1 * 1024 )), \"pending_warps\": $2, \"pending_progs_per_sm\": $3, \"pending_dw\": $4}"; }
SW="{$(sw 4 8 2 0), $(sw 4 8 2 3), $(sw 4 4 2 3), $(sw 2 4 4 3), $(sw 8 8 1 3), $(sw 1 2 8 3)}"
echo "$SW" > $R/sweep.json
timeout 300 python3 bench/phase2_deferred.py --d 1024 --heads 8 --tokens 16384 --sites 8 --sweep "$SW" > $R/chunk_1024.md 2>&1
grep -v Warn $R/chunk_1024.md; pack

#!/usr/bin/env bash
# session 39 call 5: one chunk's phase-2 backward at 1024 with 8 heads, each read's kernel
# (today) against, interleaved in rounds and replayed from CUDA graphs (calls 1-3 timed the host launches too), the gradient rows now loaded as 16-byte vectors (calls 2-4: 2-byte loads, no alignment hint), the reads deferred to their sources with the dedicated kernel
# (_deferred_bwd_kernel): tokens per tile (pending_elems / d), warps, programs per SM.
# run: C=<commit> OUT=$OUT bash bench/results/session39/5_deferred_aligned/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
sw() { echo "\"$1/$2w/$3\": {\"pending_elems\": $(( $1 * 1024 )), \"pending_warps\": $2, \"pending_progs_per_sm\": $3}"; }
SW="{$(sw 2 8 2), $(sw 2 4 2), $(sw 1 4 3), $(sw 1 8 2), $(sw 4 8 1), $(sw 1 4 4), $(sw 2 4 4)}"
echo "$SW" > $R/sweep.json
timeout 300 python3 bench/phase2_deferred.py --d 1024 --heads 8 --tokens 16384 --sites 8 --sweep "$SW" > $R/chunk_1024.md 2>&1
grep -v Warn $R/chunk_1024.md; pack

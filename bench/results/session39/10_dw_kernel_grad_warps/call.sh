#!/usr/bin/env bash
# session 39 call 10: (1) one chunk's phase-2 backward at 1024 with 8 heads: per read
# (today) against deferred with r dz out and dw as triton products (_deferred_dw_kernel,
# "pending_dw": 3), and without dw (a diagnostic, 0); (2) phase 1's fused COEF pass
# (coef_grads) with more warps per program, on one read as training takes it.
# run: C=<commit> OUT=$OUT bash bench/results/session39/10_dw_kernel_grad_warps/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session39/10_dw_kernel_grad_warps
sw() { echo "\"$1/$2w/$3 dw$4 t$5 p$6\": {\"pending_elems\": $(( $1 * 1024 )), \"pending_warps\": $2, \"pending_progs_per_sm\": $3, \"pending_dw\": $4, \"pending_dw_tokens\": $5, \"pending_dw_progs_per_sm\": $6}"; }
SW="{$(sw 4 8 2 0 64 4), $(sw 4 8 2 3 64 4), $(sw 4 4 2 3 64 4), $(sw 2 4 4 3 64 4), $(sw 8 8 1 3 64 4), $(sw 4 8 2 3 128 4), $(sw 4 8 2 3 64 8), $(sw 4 8 2 3 32 8)}"
echo "$SW" > $R/sweep.json
timeout 200 python3 bench/phase2_deferred.py --d 1024 --heads 8 --tokens 16384 --sites 8 --sweep "$SW" > $R/chunk_1024.md 2>&1
grep -v Warn $R/chunk_1024.md; pack
timeout 250 python3 bench/phase1_call.py --direct-rows --d 1024 --n 9,25,41 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep_grad.json > $R/grad_1024.md 2>&1; grep "^|" $R/grad_1024.md | grep -v -- "---"; pack

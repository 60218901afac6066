#!/usr/bin/env bash
# session 39 call 6: where the deferred reads kernel's time goes: without its dw (a
# diagnostic, "pending_dw": false, wrong dw), against with it and the per-read kernels.
# run: C=<commit> OUT=$OUT bash bench/results/session39/6_deferred_nodw/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
SW='{"2/8w/2": {"pending_elems": 2048, "pending_warps": 8, "pending_progs_per_sm": 2},
 "2/8w/2 no dw": {"pending_elems": 2048, "pending_warps": 8, "pending_progs_per_sm": 2, "pending_dw": false},
 "1/4w/3 no dw": {"pending_elems": 1024, "pending_warps": 4, "pending_progs_per_sm": 3, "pending_dw": false},
 "1/2w/8 no dw": {"pending_elems": 1024, "pending_warps": 2, "pending_progs_per_sm": 8, "pending_dw": false},
 "2/4w/4 no dw": {"pending_elems": 2048, "pending_warps": 4, "pending_progs_per_sm": 4, "pending_dw": false},
 "4/8w/2 no dw": {"pending_elems": 4096, "pending_warps": 8, "pending_progs_per_sm": 2, "pending_dw": false}}'
echo "$SW" > $R/sweep.json
timeout 300 python3 bench/phase2_deferred.py --d 1024 --heads 8 --tokens 16384 --sites 8 --sweep "$SW" > $R/chunk_1024.md 2>&1
grep -v Warn $R/chunk_1024.md; pack

#!/usr/bin/env bash
# session 39 call 1: one chunk's phase-2 backward, each read's kernel (today) against the
# reads deferred to their sources (_deferred_reads_backward, the S-query loop of
# _bwd_kernel with a gradient-row table), and the deferred kernel's tile / warps / programs.
# run: C=<commit> OUT=$OUT bash bench/results/session39/1_deferred_proto/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
SW='{"4096/4w/4": {}, "2048/4w/8": {"pending_elems": 2048, "pending_progs_per_sm": 8},
 "2048/2w/8": {"pending_elems": 2048, "pending_warps": 2, "pending_progs_per_sm": 8},
 "1024/2w/16": {"pending_elems": 1024, "pending_warps": 2, "pending_progs_per_sm": 16},
 "1024/1w/16": {"pending_elems": 1024, "pending_warps": 1, "pending_progs_per_sm": 16},
 "4096/8w/2": {"pending_elems": 4096, "pending_warps": 8, "pending_progs_per_sm": 2},
 "8192/8w/2": {"pending_elems": 8192, "pending_warps": 8, "pending_progs_per_sm": 2},
 "4096/4w/8": {"pending_elems": 4096, "pending_progs_per_sm": 8}}'
for D in 1024 1280 768; do
  timeout 170 python3 bench/phase2_deferred.py --d $D --heads 8 --tokens 16384 --sites 8 --sweep "$SW" > $R/chunk_$D.md 2>&1
  cat $R/chunk_$D.md | grep -v Warn; pack
done

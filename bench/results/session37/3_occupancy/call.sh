#!/usr/bin/env bash
# session 37 call 3: phase 1's few-source kernels (several tokens at a time since session
# 36) run at about half of copy bandwidth in one-warp programs, eight per SM (forward and
# COEF pass), and four-warp gather programs at 253 registers. One phase-1 read at 350M's
# shape (d 1024, 8 heads, 6 queries) with 4 and 8 sources under programs per SM, warps,
# pipeline stages and register caps, side by side in one process (bench/phase1_call.py --sweep).
# Call 2: call 1's leads refined (gather register caps, the COEF pass's own token cap
# "coef_tokens", caps for the split kernels "fwd_split_maxnreg" / "coef_split_maxnreg"),
# with 1 and 16 sources too (16: a token at a time, which the same settings also change).
# Call 3: call 2's leads and their combinations, with 25 and 41 sources too (full MHAR's
# chunks at 350M read 1, 9, 17, ..., 41 sources).
# run: C=<commit> OUT=$OUT bash bench/results/session37/3_occupancy/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session37/3_occupancy
timeout 560 python3 bench/phase1_call.py --d 1024 --n 1,4,8,16,25,41 --queries 6 --heads 8 --iters 20 \
  --sweep $D/sweep.json 2>&1 | tee $R/sweep.md
pack

#!/usr/bin/env bash
# session 43 call 4: why the fused pre-norm (call 3: mhar 132.9 ms against mhar-unfused
# 130.9 ms) is slower: torch.profiler over the graphed 350M step, every kernel's ms per
# step, for mhar-unfused (first: the reference the summary subtracts), mhar (fused),
# and mhar+w1 (fused, the pre-norm backward at 1 warp instead of 2).
# run: C=<commit> OUT=$OUT bash bench/results/session43/4_why_slower/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 400 python3 bench/results/session43/4_why_slower/variants.py --preset paper-350m \
  --methods mhar-unfused,mhar,mhar+w1 --out $R > $R/profile_350m.log 2>&1
tail -n 30 $R/profile_350m.log | cut -c1-160; pack

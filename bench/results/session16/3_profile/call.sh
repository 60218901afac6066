#!/usr/bin/env bash
# session 16 call 3: where the step's time goes with this session's code: the 100M baseline, and the 1B baseline, mhar and mhar-block (bench/profile_step.py, graphed, one update per microbatch)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 90 python3 bench/profile_step.py --preset paper-100m --methods baseline --out $R > $R/profile_100m.log 2>&1
tail -n 12 $R/profile_100m.log; pack
timeout 330 python3 bench/profile_step.py --preset paper-1b --methods baseline,mhar,mhar-block --out $R > $R/profile_1b.log 2>&1
tail -n 14 $R/profile_1b.log; pack

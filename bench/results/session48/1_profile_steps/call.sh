#!/usr/bin/env bash
# session 48 call 1: are MHAR's backward products really slower than the baseline's at 350M
# (session 47's call 7 said 5-10%, from a profile of two steps)? The same profile with six
# profiled steps, each step's kernel time by kind (profile_step.py's new _steps.tsv), with
# nvidia-smi sampling the SM clock and power every 20 ms beside it; then 1B (session 21
# saw its backward products 4.2-4.4% slower, also from two profiled steps).
# run: C=<commit> OUT=$OUT bash bench/results/session48/1_profile_steps/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $R/gpu.csv
prof() {  # tag preset limit
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 20 > $R/smi_$1.csv 2>/dev/null &
  smi=$!
  timeout $3 python3 bench/profile_step.py --preset $2 --methods baseline,mhar --trace-steps 6 --out $R \
    > $R/profile_$1.log 2>&1; echo "rc=$? $1"
  kill $smi; grep -h "per profiled step\|compile=regions:" $R/profile_$1.log; pack
}
prof 350m paper-350m 260
prof 1b paper-1b 300

#!/usr/bin/env bash
# Session 60, call 4: Trainer.fit's steps against its train_step in a loop, by variant
# (TensorBoard off, constant lr, gc off), and cProfile over one fit (bench/fit_loop_probe.py).
# run: C=<commit> OUT=$OUT bash bench/results/session60/4_fit_variants/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.csv
timeout 420 python3 bench/fit_loop_probe.py --preset paper-100m --method baseline --batch 8 --steps 30 \
  --cprofile --out $R > $R/probe.log 2>&1
echo "probe exit $? at ${SECONDS}s"; grep -v "note:\|step 30/30" $R/probe.log | tail -8
sed -n '/function calls/,$p' $R/fit_loop_probe.txt | head -60
pack

#!/usr/bin/env bash
# Session 60, call 2: why `mhar train` stepped slower than `mhar bench step` in call 1
# (the 100M baseline 13% slower, MHAR 2%): the trainer's step on its synthetic data and on
# uniform token ids, against the bench's step, each with its kernel time by kind.
# run: C=<commit> OUT=$OUT bash bench/results/session60/2_trainer_probe/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
for m in baseline mhar; do
  timeout 270 python3 bench/trainer_probe.py --preset paper-100m --method $m --batch 8 --out $R > $R/probe_$m.log 2>&1
  echo "probe $m exit $? at ${SECONDS}s"; grep "^|" $R/trainer_probe_paper-100m_$m.txt; pack
done

#!/usr/bin/env bash
# Session 53, call 4: block MHAR at 512 (100M) stays one-pass under 'auto' (session 46:
# 0.930x against 0.906x two-phase, before the 512 entry took 1024's phase-1 settings and
# this session's fused pass at 12 an SM). Re-timed: one-pass against two-phase from the
# fourth block on (the 'auto' form at 1024 and 1280, stream.phase1_min_sources=4) and all
# two-phase (=0), each process with the baseline, one-pass block and two-phase block.
# With the device time left, only the first process (min4) is run: MIN0=1 runs the second.
# run: C=<commit> OUT=$OUT bash bench/results/session53/4_block_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag min_sources
  timeout 140 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar-block,mhar-block@two-phase \
    --steps 30 --warmup 3 --out $R --tag $1 stream.phase1_min_sources=$2 > $R/step_$1.log 2>&1
  echo "rc=$? $1 at ${SECONDS}s"; grep -h "| paper" $R/step_$1.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png; pack
}
step min4 4
[ -n "${MIN0:-}" ] && step min0 0

#!/usr/bin/env bash
# Session 53, staged for a later session (not run: the device time ran out).
# Block MHAR at 512 (100M) stays one-pass under 'auto': session 46's call 2 measured it
# 0.930x of the baseline against 0.906x all two-phase, before its call 3 gave 512 the
# 1024 entry's phase-1 settings and before session 53's fused pass at 12 an SM. Re-timed
# here: one-pass against two-phase from the fourth block on (the 'auto' form at 1024 and
# 1280, stream.phase1_min_sources=4), each process with the baseline, one-pass block and
# two-phase block; MIN0=1 also runs a process with every block two-phase (=0). About 75 s
# a process.
# run: C=<commit> OUT=$OUT bash bench/results/session53/next_1_block_512/call.sh
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
if [ -n "${MIN0:-}" ]; then step min0 0; fi

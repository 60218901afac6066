#!/usr/bin/env bash
# session 35 call 2: stream.phase1_min_sources, a two-phase chunk (block) whose phase 1
# would read fewer sources than this reads one-pass (phase 1's product kernels cost about
# the same whatever their source count, session 34). One process per threshold, baseline
# in the same process, 30 timed steps: 350M at T = 0 (pure two-phase, and one-pass block
# for reference), 4 and 6; 1B at T = 5 with one-pass block for reference.
# run: C=<commit> OUT=$OUT bash bench/results/session35/2_phase1_min_sources/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # preset, threshold, methods
  timeout 200 python3 -m mhar bench step --preset paper-$1 --methods $3 --steps 30 --warmup 3 --out $R \
    --tag $1_T$2 stream.phase1_min_sources=$2 > $R/step_$1_T$2.log 2>&1
  echo "$1 T=$2"; grep -h "| paper" $R/step_$1_T$2.md; rm -f $R/*.png; pack
}
step 350m 0 baseline,mhar-block,mhar-block@two-phase,mhar
step 350m 4 baseline,mhar-block@two-phase,mhar
step 350m 6 baseline,mhar-block@two-phase
step 1b 5 baseline,mhar-block,mhar-block@two-phase

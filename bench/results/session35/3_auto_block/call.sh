#!/usr/bin/env bash
# session 35 call 3: 'auto' block routing as built (its first three blocks one-pass, the
# rest two-phase: phase1_min_sources 4). GPU graph tests first (the mixed schedules'
# replays, new); then, one process each with the baseline in the same process, 30 timed
# steps: 350M mhar-block ('auto') and one head (mhar-block-h1: 'auto' against pure
# two-phase, 'auto' before this session); 1B mhar-block ('auto').
# run: C=<commit> OUT=$OUT bash bench/results/session35/3_auto_block/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/train/test_cuda_graphs.py -k "replay_matches_eager" \
  > $R/tests.log 2>&1
tail -n 2 $R/tests.log; pack
step() {  # preset, tag, methods
  timeout 200 python3 -m mhar bench step --preset paper-$1 --methods $3 --steps 30 --warmup 3 --out $R \
    --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md; rm -f $R/*.png; pack
}
step 350m auto baseline,mhar-block,mhar-block-h1,mhar-block-h1@two-phase
step 1b auto baseline,mhar-block

#!/usr/bin/env bash
# session 38 call 5: the fused COEF pass (coef_grads) against the two passes, and its
# settings, on one phase-1 read as training takes it (bench/phase1_call.py --direct-rows:
# the sources in a sink; here every deferred term is applied by the sink, where in training
# phase 2 takes most). 350M's width at 9-41 sources, then 1B's at 9-65.
# run: C=<commit> OUT=$OUT bash bench/results/session38/5_sweep/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session38/5_sweep
timeout 250 python3 bench/phase1_call.py --direct-rows --d 1024 --n 9,25,41 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep_1024.json > $R/sweep_1024.md 2>&1; grep "^|" $R/sweep_1024.md | grep -v -- "---"; tail -n 2 $R/sweep_1024.md; pack
timeout 200 python3 bench/phase1_call.py --direct-rows --d 1280 --n 17,41,65 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep_1280.json > $R/sweep_1280.md 2>&1; grep "^|" $R/sweep_1280.md | grep -v -- "---"; tail -n 2 $R/sweep_1280.md; pack

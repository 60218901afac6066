#!/usr/bin/env bash
# session 47 call 6: hyper-connections with the new default (segments halving down to 6)
# at 1B's trainer microbatch (32 x 1024), the one size and microbatch call 5 left out.
# run: C=<commit> OUT=$OUT bash bench/results/session47/6_hyper_1b_global/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 220 python3 -m mhar bench step --preset paper-1b --methods baseline,hyper --steps 3 --warmup 2 \
  --batch global --out $R --tag 1b_global > $R/step_1b_global.log 2>&1
echo "rc=$? 1b_global"; grep -h "| paper" $R/step_1b_global.md | sort -u; rm -f $R/*.png
tar czf "$OUT/r.tar.gz" -C "$OUT" r

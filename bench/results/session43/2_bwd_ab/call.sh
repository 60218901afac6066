#!/usr/bin/env bash
# session 43 call 2: phase 2's backward adding into sums (`_bwd_kernel`, 1024, 8 heads)
# with 2 warps at 8 programs per SM ("bwd2", session 42's harness pick: 6.387 against
# 6.485 ms) against as built (1 warp, 16 per SM), and its two halves apart (w1p8: 8 per
# SM, i.e. half the d(q*g) partial rows; w2p16: 2 warps), side by side in one process
# (ab.py), as built twice and bwd2 twice.
# run: C=<commit> OUT=$OUT bash bench/results/session43/2_bwd_ab/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session43/2_bwd_ab
step() {  # tag methods
  timeout 480 python3 $D/ab.py $D/variants.json --preset paper-350m --methods $2 \
    --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 350m baseline,mhar,mhar+bwd2,mhar+w1p8,mhar+w2p16,mhar,mhar+bwd2

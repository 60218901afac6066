#!/usr/bin/env bash
# session 44 call 1: the baseline's MFU and MHAR's ratio at a larger microbatch. The
# paper's global batch is 32 x 1024 at 350M and 64 x 2048 at 100M; the bench's default
# microbatches are 16 x 1024 and 8 x 2048 with one update each. One microbatch of 32 x
# 1024 is the paper's whole update at 350M: the optimiser's step (about 4.5 ms of the
# 115 ms step at 350M, session 43 call 4) is then spread over twice the tokens.
# Alternating processes, graphed, 30 timed steps (20 at the larger microbatch).
# run: C=<commit> OUT=$OUT bash bench/results/session44/1_microbatch/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag preset methods steps [bench args]
  timeout 200 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:5}" > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 350m_b32_a paper-350m baseline,mhar 20 --batch 32
step 350m_b16_a paper-350m baseline,mhar 30
step 100m_b16 paper-100m baseline 20 --batch 16
step 100m_b8 paper-100m baseline 30
step 350m_b32_b paper-350m baseline,mhar 20 --batch 32

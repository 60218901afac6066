#!/usr/bin/env bash
# session 44 call 2: the baseline and MHAR at the trainer presets' own microbatches (the
# paper's global batch as one microbatch: 64 x 2048 at 100M, 32 x 1024 at 1B; call 1 had
# 350M), against the bench's defaults (8 x 2048 at 100M) in the same call. Graphed,
# separate processes, 20 timed steps at the larger microbatches, 30 at the default.
# run: C=<commit> OUT=$OUT bash bench/results/session44/2_trainer_batches/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_b64 paper-100m baseline,mhar 20 150 --batch 64
step 100m_b8 paper-100m baseline,mhar 30 120
step 1b_b32 paper-1b baseline,mhar 20 280 --batch 32

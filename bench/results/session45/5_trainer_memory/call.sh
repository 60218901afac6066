#!/usr/bin/env bash
# session 45 call 5: memory and speed at the other two trainer microbatches (100M 64 x 2048,
# 350M 32 x 1024) with the final read two-phase; session 44 read MHAR's memory there as
# 1.045 and 1.039 x baseline.
# run: C=<commit> OUT=$OUT bash bench/results/session45/5_trainer_memory/call.sh
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
step 100m_b64 paper-100m baseline,mhar 10 140 --batch global
step 350m_b32 paper-350m baseline,mhar 10 140 --batch global

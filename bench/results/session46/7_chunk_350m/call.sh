#!/usr/bin/env bash
# session 46 call 7: the two-phase chunk at 350M (1024, 48 sublayers): 6 against 8 (the
# default, chosen in session 10 before most of today's kernels), one process each, a
# third (6 again) if the device time lasts. A lead, not a decision: one process a row.
# run: C=<commit> OUT=$OUT bash bench/results/session46/7_chunk_350m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag chunk
  timeout 95 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar --steps 20 --warmup 3 \
    --chunk $2 --out $R --tag $1 > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 350m_chunk6_1 6
step 350m_chunk8 8
step 350m_chunk6_2 6

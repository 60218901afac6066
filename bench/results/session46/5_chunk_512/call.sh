#!/usr/bin/env bash
# session 46 call 5: the two-phase chunk at d = 512 (100M, 24 sublayers), now that its
# reads are two-phase: 6, 12 and 8 (the default) sublayers a chunk, one process each.
# run: C=<commit> OUT=$OUT bash bench/results/session46/5_chunk_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_chunk6 paper-100m baseline,mhar 30 100 --chunk 6
step 100m_chunk12 paper-100m baseline,mhar 30 100 --chunk 12
step 100m_chunk8 paper-100m baseline,mhar 30 100 --chunk 8
step 100m_chunk4 paper-100m baseline,mhar 30 100 --chunk 4

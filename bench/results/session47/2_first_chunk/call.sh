#!/usr/bin/env bash
# session 47 call 2: MHAR's first chunk one-pass (stream.phase1_min_sources=2) against
# the defaults at 350M, alternating processes (call 1: 130.1 against 131.2 ms, one each);
# then 1B: hyper-connections with stream.hyper_recompute=8 and MHAR's first chunk
# one-pass in one process, the defaults in the next.
# run: C=<commit> OUT=$OUT bash bench/results/session47/2_first_chunk/call.sh
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
step 350m_min2_a paper-350m baseline,mhar 20 100 stream.phase1_min_sources=2
step 350m_def_a paper-350m baseline,mhar 20 100
step 350m_min2_b paper-350m baseline,mhar 20 100 stream.phase1_min_sources=2
step 350m_def_b paper-350m baseline,mhar 20 100
step 1b_k8 paper-1b baseline,hyper,mhar 10 200 stream.hyper_recompute=8 stream.phase1_min_sources=2
step 1b_def paper-1b baseline,mhar 10 150

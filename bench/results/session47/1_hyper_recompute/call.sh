#!/usr/bin/env bash
# session 47 call 1: hyper-connections keeping their n streams at every 8th sublayer
# (stream.hyper_recompute=8) for the memory bar (1.058 x the baseline's with every 4th,
# session 8); in the same processes MHAR with its first chunk one-pass
# (stream.phase1_min_sources=2: chunk 0's phase 1 would read the embedding alone);
# controls at the defaults in the processes between.
# run: C=<commit> OUT=$OUT bash bench/results/session47/1_hyper_recompute/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" > $R/versions.txt
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_k8 paper-100m baseline,hyper,mhar 20 150 stream.hyper_recompute=8 stream.phase1_min_sources=2
step 100m_def paper-100m baseline,hyper,mhar 20 120
step 350m_k8 paper-350m baseline,hyper,mhar 10 170 stream.hyper_recompute=8 stream.phase1_min_sources=2
step 350m_def paper-350m baseline,mhar 10 110
